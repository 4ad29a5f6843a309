"""R2V/BabyAI-v0: minigrid's BabyAI levels as text (:mod:`r2v_envs.babyai.env`, :mod:`r2v_envs.babyai.text`)."""
