"""Choosing by likelihood: packed scoring equals scoring each action on its own, one forward pass per decision,
and `r2v eval --choose likelihood` plays the action a tiny locally trained model was taught to prefer."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from r2v_agents.context import Context  # noqa: E402
from r2v_agents.likelihood import end_token_id, score_actions  # noqa: E402
from r2v_agents.shards import load_rows  # noqa: E402
from r2v_agents.tiny import EOS, build_tiny_model, train_tokenizer  # noqa: E402
from r2v_eval.model_agents import HFChatAgent, chat_messages  # noqa: E402

TASKS = ("scripted-0", "scripted-1", "scripted-2")
PREFERRED = "look"  # last of the sorted admissible actions: a pick by position would not find it


def _contexts() -> list[Context]:
    """The contexts an agent that always looks sees on the scripted tasks (three steps each)."""
    import gymnasium as gym

    import r2v_envs  # noqa: F401

    env = gym.make("R2V/Scripted-v0", seed=0, perturbations=None)
    out = []
    for t in TASKS:
        obs, info = env.reset(options={"task_id": t})
        ctx = replace(Context.start(info["goal"], obs, info), benchmark="scripted", task_id=t)
        for _ in range(3):
            out.append(ctx)
            obs, reward, _, _, info = env.step(PREFERRED)
            ctx = ctx.advance(PREFERRED, obs, reward, info)
    env.close()
    return out


@pytest.fixture(scope="module")
def looker(tmp_path_factory):
    """A 1-layer model trained for a few seconds to answer every scripted prompt with ``look``."""
    torch.set_num_threads(1)
    contexts = _contexts()
    prompts = [_plain(c) for c in contexts]
    tok = train_tokenizer(prompts * 2, vocab_size=400)
    model = build_tiny_model(tok, hidden_size=48, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=96)
    end = end_token_id(tok)
    rows = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    act = tok(PREFERRED, add_special_tokens=False)["input_ids"] + [end]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(30):
        for p in rows:
            ids = torch.tensor([p + act])
            labels = torch.full_like(ids, -100)
            labels[0, len(p):] = ids[0, len(p):]
            model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    out = tmp_path_factory.mktemp("looker")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    assert tok.convert_tokens_to_ids(EOS) == end
    return str(out), model, tok


def _plain(ctx: Context) -> str:
    """The prompt HFChatAgent renders for a tokenizer without a chat template."""
    system, user = chat_messages(ctx)
    return f"{system['content']}\n\n{user['content']}"


def test_packed_scores_equal_scoring_each_action_alone():
    tok = train_tokenizer(["go south take the coin look inventory open the wooden door"] * 10, vocab_size=300)
    model = build_tiny_model(tok, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                             intermediate_size=64).eval()
    prompt, actions = "Goal: take the coin. Action:", ["go south", "take the coin", "look", "open the wooden door"]
    end = end_token_id(tok)
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    alone = []
    for a in actions:
        x = tok(a, add_special_tokens=False)["input_ids"] + [end]
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=torch.tensor([p + x])).logits[0].float(), -1)
        alone.append(float(sum(lp[len(p) - 1 + j, x[j]] for j in range(len(x)))))
    assert score_actions(model, tok, prompt, actions) == pytest.approx(alone, abs=1e-4)


def test_one_forward_pass_per_decision(looker):
    _, model, tok = looker
    agent = HFChatAgent(model, tok, choose="likelihood")
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        contexts = _contexts()[:4]
        decisions = agent.act_batch(contexts, [{}] * len(contexts))
    finally:
        handle.remove()
    assert len(calls) == len(contexts)
    for d, c in zip(decisions, contexts):
        assert [x.action for x in d.candidates] == list(c.admissible_actions)
        assert d.action == PREFERRED and d.meta["grounding"] == "likelihood"


def test_eval_choose_likelihood_plays_the_trained_preference_and_records_scores(looker, tmp_path):
    from r2v_eval.cli import main

    path, _, _ = looker
    out = tmp_path / "lik"
    main(["--agent", f"hf:{path}", "--choose", "likelihood", "--envs", "R2V/Scripted-v0", "--perturbations", "none",
          "--seeds", "0", "--task-ids", *TASKS, "--max-steps", "4", "--out", str(out), "--no-progress",
          "--bootstrap", "100"])
    steps = load_rows(out / "runs" / "R2V_Scripted-v0" / "none", "steps")
    assert len(steps) == 4 * len(TASKS)
    for s in steps:
        assert s["action"] == PREFERRED and s["grounding"] == "likelihood" and s["reply"] is None
        scores = {c["action"]: c["logprob"] for c in s["candidates"]}
        assert set(scores) == set(s["admissible_actions"]) and max(scores, key=scores.get) == PREFERRED
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["agent"]["name"].endswith("+likelihood")


def test_likelihood_needs_a_local_model():
    from r2v_eval.agents import AgentOptions, build_agent

    with pytest.raises(ValueError, match="hf:"):
        build_agent("openai", AgentOptions(model="m", choose="likelihood"))
