"""``R2V/ALFWorld-v0``: ALFWorld's household tasks on its real TextWorld/PDDL engine (``$ALFWORLD_DATA``, or games
generated offline over the domain that ships in the ``alfworld`` wheel).

Modules:

* :mod:`~r2v_envs.alfworld.env`: the Gymnasium env;
* :mod:`~r2v_envs.alfworld.engine`: ALFWorld's own .tw-pddl path (demangler, infos, the handcoded expert);
* :mod:`~r2v_envs.alfworld.generate`: offline PDDL problems over alfred.pddl.
"""

__all__ = [
    # the env
    "env", "engine",
    # its games
    "generate",
]
