"""R2V/ScienceWorld-v0: ScienceWorld on its real engine (see :mod:`r2v_envs.scienceworld.env`)."""
