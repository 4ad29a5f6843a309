"""``R2V/TextWorld-v0``: TextWorld games generated locally (custom quests, cooking, treasure hunter, coin collector)
behind the r2v text-env contract.

Modules:

* :mod:`~r2v_envs.textworld.env`: the Gymnasium env over one loaded game;
* :mod:`~r2v_envs.textworld.commands`: agent text made safe for the Inform 7 / Glulx interpreter;
* :mod:`~r2v_envs.textworld.suite`: which games a suite holds (family, difficulty, generator seed);
* :mod:`~r2v_envs.textworld.generate`: TextWorld's own generator, cached and run by game servers.
"""

__all__ = [
    # the env
    "env", "commands",
    # its games
    "suite", "generate",
]
