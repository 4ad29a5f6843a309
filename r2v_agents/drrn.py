"""DRRN (He et al., 2016): a Q-network that scores each visible admissible action against the observation.

The text-game field's standard learner (the baseline of Jericho and ScienceWorld): a state encoder and an action
encoder (hashed words -> shared embedding -> one GRU each; or, ``encoder="bag"``, a mean of hashed word and bigram
embeddings, for CPU budgets), and Q(s, a) = MLP([h_s, h_a, h_s * h_a]). The state is
what an agent sees (:mod:`r2v_agents.context`): the goal, the last action and the observation, never an oracle key.
Words are hashed into a fixed number of buckets (:func:`token_ids`), so a model needs no vocabulary file and reads
text of any benchmark, perturbed or not.

:class:`DRRNPolicy` acts with the network: greedy (``temperature=0``, evaluation) or a softmax over Q / temperature
(exploration while training), drawn with :func:`r2v_agents.reference.step_rng` so a choice depends only on (seed,
episode, step), never on batching. ``drrn:RUN_DIR`` in ``r2v eval`` is :func:`drrn_agent` (the softmax policy the run
trained, :func:`trained_policy`). Training lives in
:mod:`r2v_train.drrn`.

This module imports torch at the top: only DRRN's users import it (``r2v_agents/__init__.py`` does not).

Example:
    >>> import tempfile, os, torch
    >>> from r2v_agents.context import Context
    >>> torch.manual_seed(0) and None
    >>> net = DRRN(DRRNArch(buckets=512, embed=16, hidden=16))
    >>> ctx = Context.start("Take the coin.", "A coin lies here.", {"admissible_actions": ["look", "take coin"]})
    >>> d = DRRNPolicy(net).act_batch([ctx], [{}])[0]
    >>> d.action in ("look", "take coin"), d.meta["choices"]
    (True, 2)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.pt")
    >>> save_drrn(path, net)
    >>> DRRNPolicy(load_drrn(path)).act_batch([ctx], [{}])[0].action == d.action
    True
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from r2v_agents.context import Context
from r2v_agents.policy import BatchPolicy, Decision, parse_run_spec
from r2v_agents.reference import step_rng
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError

ENCODERS = ("gru", "bag")
MODEL_FILE = "model.pt"
"""The trained network of a DRRN run directory (what ``drrn:RUN_DIR`` loads)."""
_WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


@dataclass(frozen=True)
class DRRNArch:
    """The network's shape (saved beside the weights)."""

    buckets: int = 8192
    """hash buckets of the word embedding (id 0 is padding)"""
    embed: int = 64
    """word embedding size"""
    hidden: int = 128
    """GRU state size of each encoder"""
    state_tokens: int = 160
    """words of the state text kept (goal and last action first, then the observation's start)"""
    action_tokens: int = 12
    """words of an action kept"""
    encoder: str = "gru"
    """gru (He et al.: a GRU over the hashed words) or bag (the mean of hashed word and word-bigram embeddings
    through a linear layer: no recurrence, several times faster on a CPU)"""
    history: int = 1
    """the agent's own last N actions in the state text (1: the action that led here, He et al.'s state); more
    lets a memoryless Q tell a room it has just left from a new one"""

    def __post_init__(self) -> None:
        if self.encoder not in ENCODERS:
            raise UnknownChoiceError("DRRN encoder", self.encoder, ENCODERS)
        if self.history < 1:
            raise ValueError(f"history must be >= 1, got {self.history}")


def token_ids(text: str, buckets: int, limit: int, bigrams: bool = False) -> list[int]:
    """Hashed word ids of ``text`` in [1, buckets), at most ``limit`` words (crc32: stable across processes); with
    ``bigrams`` the hashed word pairs follow.

    Example:
        >>> token_ids("Go east.", 100, 8) == token_ids("go  EAST .", 100, 8), len(token_ids("a b c", 100, 2))
        (True, 2)
        >>> len(token_ids("a b c", 100, 8, bigrams=True))
        5
    """
    words = _WORD.findall(text.lower())[:limit]
    if bigrams:
        words += [f"{a} {b}" for a, b in zip(words, words[1:])]
    return [1 + zlib.crc32(w.encode()) % (buckets - 1) for w in words] or [1]


def state_text(goal: str, observation: str, recent: Sequence[str]) -> str:
    """What the state encoder reads: the visible goal, the agent's recent actions (the last of them led here; none at
    the start), and the observation.

    Example:
        >>> state_text("Find the coin.", "A hall.", []), state_text("g", "o", ["go east", "go west"])
        ('Find the coin. | start | A hall.', 'g | go east ; go west | o')
    """
    return f"{goal} | {' ; '.join(recent) or 'start'} | {observation}"


def seen_actions(admissible: Sequence[str] | None, previous: Sequence[str] | None) -> list[str]:
    """The actions DRRN scores at a step: the visible admissible list, or, where the env hid it this step (a
    ``partial`` perturbation), the last list the agent saw in the episode.

    Example:
        >>> seen_actions(None, ["look", "go east"]), seen_actions(["take coin"], ["look"]), seen_actions(None, None)
        (['look', 'go east'], ['take coin'], [])
    """
    return list(admissible) if admissible else list(previous or ())


def context_state(ctx: Context, history: int = 1) -> str:
    return state_text(ctx.goal, ctx.observation, [t.action for t in ctx.history[-history:]])


class DRRN(nn.Module):
    """Q(s, a) over hashed-word GRU encodings of the state and of each action (see the module doc)."""

    def __init__(self, arch: DRRNArch = DRRNArch()):
        super().__init__()
        self.arch = arch
        if arch.encoder == "gru":
            self.embed = nn.Embedding(arch.buckets, arch.embed, padding_idx=0)
            self.state_gru = nn.GRU(arch.embed, arch.hidden, batch_first=True)
            self.action_gru = nn.GRU(arch.embed, arch.hidden, batch_first=True)
        else:
            self.bag = nn.EmbeddingBag(arch.buckets, arch.embed, mode="mean")
            self.state_proj = nn.Sequential(nn.Linear(arch.embed, arch.hidden), nn.ReLU())
            self.action_proj = nn.Sequential(nn.Linear(arch.embed, arch.hidden), nn.ReLU())
        self.q = nn.Sequential(nn.Linear(3 * arch.hidden, arch.hidden), nn.ReLU(), nn.Linear(arch.hidden, 1))
        self._ids: dict[tuple[str, int], list[int]] = {}

    def _token_ids(self, text: str, limit: int) -> list[int]:
        key = (text, limit)
        ids = self._ids.get(key)
        if ids is None:
            if len(self._ids) > 200_000:  # texts repeat within a game; a long run must not grow without bound
                self._ids.clear()
            ids = self._ids[key] = token_ids(text, self.arch.buckets, limit, self.arch.encoder == "bag")
        return ids

    def encode(self, texts: Sequence[str], kind: str) -> torch.Tensor:
        """One vector per text (``kind``: "state" or "action"); each distinct text is encoded once."""
        unique = list(dict.fromkeys(texts))
        limit = self.arch.state_tokens if kind == "state" else self.arch.action_tokens
        seqs = [self._token_ids(t, limit) for t in unique]
        lengths = torch.tensor([len(s) for s in seqs])
        if self.arch.encoder == "bag":
            flat = torch.tensor([i for s in seqs for i in s])
            offsets = torch.cumsum(lengths, 0) - lengths
            h = (self.state_proj if kind == "state" else self.action_proj)(self.bag(flat, offsets))
        else:
            padded = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)
            for i, s in enumerate(seqs):
                padded[i, :len(s)] = torch.tensor(s)
            packed = nn.utils.rnn.pack_padded_sequence(self.embed(padded), lengths, batch_first=True,
                                                       enforce_sorted=False)
            h = (self.state_gru if kind == "state" else self.action_gru)(packed)[1][0]
        index = {t: i for i, t in enumerate(unique)}
        return h[torch.tensor([index[t] for t in texts])]

    def score(self, h_state: torch.Tensor, h_action: torch.Tensor) -> torch.Tensor:
        """Q of state/action encoding pairs (rows aligned)."""
        return self.q(torch.cat([h_state, h_action, h_state * h_action], dim=-1)).squeeze(-1)

    def q_values(self, states: Sequence[str], actions: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        """Q of every action of ``actions[i]`` in ``states[i]`` (one tensor per state; states without actions get an
        empty one)."""
        flat = [a for acts in actions for a in acts]
        if not flat:
            return [torch.zeros(0) for _ in states]
        h_s = self.encode(states, "state")
        counts = torch.tensor([len(a) for a in actions])
        q = self.score(h_s.repeat_interleave(counts, dim=0), self.encode(flat, "action"))
        return list(torch.split(q, counts.tolist()))


def save_drrn(path: str | os.PathLike, net: DRRN, meta: dict | None = None) -> None:
    """The weights and shape of ``net`` (and ``meta``: the run's config), written atomically."""
    tmp = f"{os.fspath(path)}.tmp"
    torch.save({"arch": asdict(net.arch), "state_dict": net.state_dict(), "meta": meta or {}}, tmp)
    os.replace(tmp, path)


def load_drrn(path: str | os.PathLike) -> DRRN:
    """The network saved at ``path``; ``net.meta`` holds what was saved with it (a run's config)."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    net = DRRN(DRRNArch(**blob["arch"]))
    net.load_state_dict(blob["state_dict"])
    net.meta = blob.get("meta", {})
    return net.eval()


class DRRNPolicy(BatchPolicy):
    """Acts with a DRRN over the visible admissible actions: greedy at ``temperature=0``, else a softmax over
    Q / temperature drawn from (seed, episode, step). A step whose list the env hid scores the episode's last seen
    list (:func:`seen_actions`); with none seen yet it plays an empty action, as ``random`` does."""

    name = "drrn"

    def __init__(self, net: DRRN, temperature: float = 0.0, seed: int = 0):
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.net, self.temperature, self.seed = net, float(temperature), int(seed)
        self._seen: dict[str, list[str]] = {}

    def end_episodes(self, episode_ids):
        for key in episode_ids:
            self._seen.pop(str(key), None)

    def act_batch(self, contexts, infos):
        keys = [str(c.extra.get("episode_id", id(c))) for c in contexts]
        actions = [seen_actions(c.admissible_actions, self._seen.get(k) if c.history else None)
                   for c, k in zip(contexts, keys)]
        self._seen.update({k: a for k, a in zip(keys, actions) if a})
        with torch.no_grad():
            qs = self.net.q_values([context_state(c, self.net.arch.history) for c in contexts], actions)
        out = []
        for ctx, acts, q in zip(contexts, actions, qs):
            if not acts:
                out.append(Decision(action="", meta={"choices": 0}))
                continue
            i = int(torch.argmax(q)) if self.temperature == 0 else _softmax_draw(q, self.temperature, self.seed, ctx)
            out.append(Decision(action=acts[i], meta={"choices": len(acts), "q": round(float(q[i]), 5)}))
        return out


def _softmax_draw(q: torch.Tensor, temperature: float, seed: int, ctx: Context) -> int:
    """An index drawn with probability softmax(q / temperature), from the decision's own generator."""
    p = torch.softmax(q.double() / temperature, dim=0).tolist()
    u, acc = step_rng(seed, ctx).random(), 0.0
    for i, pi in enumerate(p):
        acc += pi
        if u < acc:
            return i
    return len(p) - 1 if not math.isnan(acc) else 0


def trained_policy(net: DRRN, overrides: dict[str, str] | None = None) -> DRRNPolicy:
    """The policy a run trained: the softmax at its training temperature and seed, as Jericho's DRRN is scored (a
    greedy DRRN repeats itself: on held-out TextWorld games it walked back and forth until the step cap). Draws are
    seeded per (seed, episode, step), so an evaluation is reproducible. ``overrides`` (a spec's
    :data:`DRRN_OPTIONS`) replace the run's temperature or seed."""
    cfg = {**getattr(net, "meta", {}).get("config", {}), **(overrides or {})}
    return DRRNPolicy(net, temperature=float(cfg.get("temperature", 0.0)), seed=int(cfg.get("seed", 0)))


DRRN_OPTIONS = ("temperature", "seed")
"""Options of a ``drrn:RUN_DIR?...`` spec: ``temperature`` (0: greedy) and ``seed`` of the softmax draws; default:
the run's own, as it trained."""


def drrn_agent(spec: str) -> DRRNPolicy:
    """``drrn:RUN_DIR`` of ``r2v eval``: the trained policy (:func:`trained_policy`) of a ``r2v drrn`` run;
    ``drrn:RUN_DIR?temperature=0`` acts greedily, ``?temperature=T&seed=S`` draws at another temperature or seed."""
    run_dir, opts = parse_run_spec(spec, DRRN_OPTIONS, "drrn")
    path = os.path.join(run_dir, MODEL_FILE)
    if not os.path.exists(path):
        raise BackendUnavailableError(f"drrn:{run_dir}", f"no {MODEL_FILE} there: give a `r2v drrn` run directory "
                                      "(a run writes it at its first checkpoint)")
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    return trained_policy(load_drrn(path), opts)
