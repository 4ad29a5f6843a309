"""r2v_agents: policies (SLM, teacher, routed R2V agent, baselines) stepped through one rollout runner.

Modules: ``policy`` (protocol, Decision, adapter for third-party agents), ``runner`` + ``shards`` + ``workers``
(rollouts, Parquet logs, router labels), ``prompts`` (the one prompt builder), ``samplers`` (transformers,
vLLM), ``tiny`` (local tiny models), ``teachers`` (oracle, OpenAI-compatible), ``verifiers``, ``features``
(the 15-dim Phi), ``routers``, ``slm`` and ``routed`` (Algorithm 2). Importing the package imports none of
torch, transformers, pyarrow, openai or vllm.
"""
