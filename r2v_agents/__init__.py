"""r2v_agents: policies (SLM, teacher, routed R2V agent, baselines) stepped through one rollout runner."""
