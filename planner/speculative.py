"""Speculative decoding: vLLM's ``--speculative-config`` and the acceptance model.

What vLLM 0.33 does (``vllm/v1/core/sched/scheduler.py``), and the kernel and
the reference engine mirror:

- After a step that sampled a token for a request, the drafter proposes
  ``num_speculative_tokens`` (k) draft tokens for it
  (``Scheduler.update_draft_token_ids``; drafts after a non-final prefill
  chunk are dropped). The next ``schedule()`` gives the request
  ``num_tokens_with_spec - num_computed_tokens`` = 1 + k tokens, cut by the
  token budget and by ``max_model_len - num_computed_tokens - 1``; the drafts
  it schedules are verified in that step.
- ``update_from_output``: of the s drafts scheduled, the target model accepts
  a leading run of a; a + 1 tokens are appended (``check_stop`` after each),
  and the s - a rejected ones are taken back from ``num_computed_tokens``.
- A waiting request with exactly one token left to compute is padded to
  1 + k tokens with invalid drafts (``pad_spec_decode``), which are rejected.
- ``update_from_output`` hashes the request's full blocks of verified
  tokens (``kv_cache_manager.cache_blocks``) after every sampled step.
- Async scheduling (``AsyncScheduler._update_after_schedule``, vLLM 0.33's
  default): a sampling step adds 1 + s output placeholders (s draft
  positions) and k placeholder drafts, so the next step is scheduled with
  1 + k tokens before this one's output lands; the output then takes the
  rejected drafts back from the computed tokens and the placeholders.

Methods (``METHODS``):

- ``ngram`` and ``ngram_gpu``: the drafter runs no model, so the step time
  charges nothing for it, and vLLM reserves no lookahead KV
  (``VllmConfig.num_lookahead_tokens`` is 0).
- ``eagle``, ``eagle3`` and ``mtp`` (``DRAFTER_METHODS``; ``SpeculativeConfig.
  use_eagle``): the drafter reads the target's hidden states and writes KV
  for the k positions past the target's query, so ``allocate_slots`` is
  called with ``num_lookahead_tokens`` = k (``VllmConfig.num_lookahead_tokens``)
  in both scheduler phases: a request's blocks cover
  min(num_computed_tokens + new tokens + k, max_model_len) tokens (the
  whole-sequence gate does not count the lookahead). Their prefill lookahead
  (``num_prefill_lookahead_tokens``, 1 for EAGLE and single-module MTP) makes
  ``Scheduler._reserve_prefill_lookahead`` a no-op, and their draft slots
  (``max_num_new_slots_for_drafting``) are 0. The drafter's step time is
  ``planner.latency.draft``'s. With prefix caching vLLM hashes each block
  with the token after it (``VllmConfig.num_hash_lookahead_tokens`` 1, so
  ``use_eagle_block_drop`` is off): ``step.hash_lookahead``. On a
  disaggregated decode side vLLM keeps the old hashes and drops the
  trailing cached block instead: not simulated, so refused. Draft models
  (``draft_model``, one extra query slot per request) and multi-module MTP
  are refused.

The acceptance model (the planner's, not vLLM's): whether the target accepts
a draft depends on the text, which a capacity plan does not have. The user
gives vLLM's logged "Per-position acceptance rate" (one rate per draft
position: the share of proposals whose draft at that position was accepted,
non-increasing) or one rate alpha (each draft accepted with probability alpha
given the ones before it were: per-position rates alpha, alpha^2, ...; the
i.i.d. model of Leviathan et al., ICML 2023). Draws are deterministic: the
draft at position j of request r, verified when r has ``nout`` output tokens,
is accepted when ``splitmix64(seed, r, nout, j) >> 11`` is below the
position's conditional threshold x 2^53. The same request at the same length
draws the same, so a run is reproducible and the kernel, the reference engine
and the recorder (``tools/record_vllm_traces.py``) agree exactly.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from planner.inputs import MAX_SMALL_FILE_BYTES, check_readable
from planner.text import count

DRAFTER_METHODS = ("eagle", "eagle3", "mtp")  # a drafter model on the target's hidden states
METHODS = ("ngram", "ngram_gpu", *DRAFTER_METHODS)  # simulated
# Released heads for Llama-3.1-8B-Instruct, named in the refusal of a method without one.
EXAMPLE_HEADS = {
    "eagle": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    "eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
}
# Keys of vLLM's SpeculativeConfig accepted here; the n-gram window acts only
# through the acceptance rate the user gives, ``model`` names an EAGLE head.
ACCEPTED_KEYS = (
    "method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "model",
)  # fmt: skip
MAX_SPEC_TOKENS = 16  # draft positions a config can carry (config columns)
ONE = 1 << 53  # threshold of a certain acceptance (draws are 53-bit)

_M1 = 0x9E3779B97F4A7C15
_M2 = 0xBF58476D1CE4E5B9
_M3 = 0x94D049BB133111EB
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class Speculation:
    """One speculative-decoding setting.

    Attributes:
        method: vLLM's method name (``METHODS``).
        num_speculative_tokens: k, draft tokens per step, 1..``MAX_SPEC_TOKENS``.
        acceptance: vLLM's per-position acceptance rates (k floats in [0, 1],
            non-increasing), or one float alpha (the i.i.d. rate).
        seed: the draws' seed (int >= 0).

    Raises:
        ValueError: one line naming the bad value.
    """

    method: str
    num_speculative_tokens: int
    acceptance: tuple[float, ...]
    seed: int = 0
    # vLLM's n-gram window, (prompt_lookup_min, prompt_lookup_max) as given
    # (None: vLLM's defaults, 5 and 5); it acts through the acceptance only
    prompt_lookup: tuple[int | None, int | None] = (None, None)
    # vLLM's ``model`` key: the EAGLE head's name or path (eagle, eagle3); it
    # is named in the serve command, its time priced as one target layer
    # plus the LM head (``planner.latency.draft``)
    draft_model: str | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            why = (
                "a draft model adds a query slot per request"
                if self.method == "draft_model"
                else "not one of vLLM's methods the planner knows"
            )
            raise ValueError(
                f"--speculative-config method {self.method!r} is not simulated ({why}): "
                f"only {', '.join(METHODS)}"
            )
        self._check_lookup()
        self._check_draft_model()
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPEC_TOKENS:
            raise ValueError(
                f"--speculative-config num_speculative_tokens must be an integer in "
                f"1..{MAX_SPEC_TOKENS}, got {k!r}"
            )
        a = self.acceptance
        if len(a) not in (1, k):
            raise ValueError(
                f"--spec-acceptance needs 1 rate or {k} (num_speculative_tokens), got {len(a)}"
            )
        for x in a:
            if not (isinstance(x, float | int) and math.isfinite(x) and 0.0 <= x <= 1.0):
                raise ValueError(f"--spec-acceptance rates must be in [0, 1], got {x!r}")
        if any(a[j + 1] > a[j] for j in range(len(a) - 1)):
            raise ValueError(
                "--spec-acceptance per-position rates cannot rise with the position "
                f"(a draft is verified only after the ones before it were accepted): {list(a)}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--spec-seed must be an integer >= 0, got {self.seed!r}")

    @property
    def lookahead_tokens(self) -> int:
        """vLLM's ``VllmConfig.num_lookahead_tokens``: KV slots allocated past
        the scheduled tokens, k for a drafter method, 0 for n-gram."""
        return self.num_speculative_tokens if self.method in DRAFTER_METHODS else 0

    @property
    def step_tokens(self) -> int:
        """Tokens of one speculative step, 1 + k + lookahead (vLLM's
        ``num_spec_decode_tokens``, ``Scheduler.__init__``): what a KV load
        leaves room for and in-flight reservations count past a sequence."""
        return 1 + self.num_speculative_tokens + self.lookahead_tokens

    def kv_slack_tokens(self, async_scheduling: bool) -> int:
        """KV tokens a request can hold past its own length L - 1 (the last
        sampled token is never fed back) with these drafts: a verifying step
        allocates its k scheduled drafts (``allocate_slots``' num_new_tokens =
        1 + k, ``vllm/v1/core/sched/scheduler.py``) plus a drafter's
        ``lookahead_tokens``, and rejected drafts give back no blocks; under
        async scheduling the step in flight holds k more (its drafts are
        counted before their output lands). So k (n-gram) or 2k (a drafter),
        plus k with async. The kernel's peak on a lone request is exactly
        L - 1 + this (``tests/test_speculative.py``); the analytic KV-safe limit
        (``SchedulerConfig.kv_safe_max_num_seqs``) adds it to L."""
        k = self.num_speculative_tokens
        return k + self.lookahead_tokens + (k if async_scheduling else 0)

    def _check_draft_model(self) -> None:
        """vLLM needs ``model`` for an EAGLE head (``SpeculativeConfig``) and
        takes none for n-gram or MTP (the target's own MTP layers). Raises
        ValueError (one line)."""
        m = self.draft_model
        if m is not None and (not isinstance(m, str) or not m.strip()):
            raise ValueError(f"--speculative-config model must be a name or path, got {m!r}")
        if self.method in ("eagle", "eagle3") and m is None:
            raise ValueError(
                f"--speculative-config method {self.method!r} needs 'model' (the EAGLE head, "
                f"e.g. {EXAMPLE_HEADS[self.method]})"
            )
        if self.method not in ("eagle", "eagle3") and m is not None:
            raise ValueError(
                f"--speculative-config 'model' is for eagle and eagle3, not {self.method!r}"
            )

    def _lookup_given(self) -> list[tuple[str, int]]:
        """(vLLM's key, value) of each n-gram window bound given."""
        keys = ("prompt_lookup_min", "prompt_lookup_max")
        return [(n, v) for n, v in zip(keys, self.prompt_lookup, strict=True) if v is not None]

    def _check_lookup(self) -> None:
        """``prompt_lookup_min``/``max`` as vLLM 0.33 takes them
        (``SpeculativeConfig``: integers >= 1, min <= max; n-gram only).
        Raises ValueError."""
        if self._lookup_given() and self.method in DRAFTER_METHODS:
            raise ValueError(
                "--speculative-config prompt_lookup_min/max are n-gram keys, "
                f"not for method {self.method!r}"
            )
        for name, v in self._lookup_given():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"--speculative-config {name} must be an integer >= 1, got {v!r}")
        lo, hi = self.prompt_lookup
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(
                f"--speculative-config prompt_lookup_min {lo} must be <= prompt_lookup_max {hi}"
            )

    def per_position(self) -> tuple[float, ...]:
        """vLLM's per-position acceptance rates (k floats): P(accepted >= j)."""
        if len(self.acceptance) == 1:
            return tuple(self.acceptance[0] ** j for j in range(1, self.num_speculative_tokens + 1))
        return tuple(float(x) for x in self.acceptance)

    def mean_acceptance_length(self) -> float:
        """Tokens per verifying step on average, 1 + sum of per-position rates
        (vLLM's logged "Mean acceptance length")."""
        return 1.0 + sum(self.per_position())

    def thresholds(self) -> np.ndarray:
        """The conditional acceptance thresholds, shape (MAX_SPEC_TOKENS,) int64:
        position j accepts a draw below ``t[j]`` (of 2^53) given position j-1
        accepted; rate a_j / a_(j-1), 0 after a rate of 0; unused positions 0."""
        t = np.zeros(MAX_SPEC_TOKENS, dtype=np.int64)
        prev, iid = 1.0, len(self.acceptance) == 1
        for j, a in enumerate(self.per_position()):
            p = self.acceptance[0] if iid else 0.0 if prev == 0.0 else min(a / prev, 1.0)
            t[j] = ONE if p >= 1.0 else int(math.floor(p * ONE))
            prev = a
        return t

    def as_json(self) -> dict:
        """A command's ``--json`` ``speculation``: method, k, per-position
        acceptance, mean acceptance length, seed, vLLM's config."""
        return {
            "method": self.method,
            "num_speculative_tokens": self.num_speculative_tokens,
            "per_position_acceptance": list(self.per_position()),
            "mean_acceptance_length": self.mean_acceptance_length(),
            "seed": self.seed,
            "speculative_config": self.config_json(),
        }

    def config_json(self) -> str:
        """vLLM's ``--speculative-config`` for this setting (compact JSON)."""
        d: dict = {"method": self.method}
        if self.draft_model is not None:
            d["model"] = self.draft_model
        d["num_speculative_tokens"] = self.num_speculative_tokens
        return json.dumps(d | dict(self._lookup_given()), separators=(",", ":"))

    def acceptance_text(self) -> str:
        """The acceptance as given (``--spec-acceptance``'s spelling)."""
        return ",".join(f"{x:g}" for x in self.acceptance)

    def line(self) -> str:
        """One line for the output."""
        rates = ", ".join(f"{x:.2f}" for x in self.per_position())
        return (
            f"speculative decoding: {self.method}, "
            f"{count(self.num_speculative_tokens, 'draft token')} per step; "
            f"per-position acceptance {rates} (mean acceptance length "
            f"{self.mean_acceptance_length():.2f}; seed {self.seed}); " + self._drafter_note()
            + self._lookup_note()
        )  # fmt: skip

    def _drafter_note(self) -> str:
        """What the drafter costs, in words."""
        if self.method not in DRAFTER_METHODS:
            return "the drafter runs no model"
        head = self.draft_model or "the model's MTP layer"
        return (
            f"the drafter ({head}) is priced as one target layer plus the LM head per pass, "
            f"{count(self.num_speculative_tokens, 'pass', 'passes')} per step (k), and holds "
            f"{count(self.lookahead_tokens, 'lookahead KV slot')} per request; a pool sized "
            "from --model/--gpu leaves room for its weights and KV layer (an estimate: "
            "ModelSpec.with_drafter)"
        )

    def _lookup_note(self) -> str:
        """The n-gram window given, which acts through the acceptance only."""
        given = [f"{n} {v}" for n, v in self._lookup_given()]
        if not given:
            return ""
        return f"; {', '.join(given)} (acting only through the acceptance given)"


def parse_speculative_config(text: str) -> dict:
    """vLLM's ``--speculative-config`` JSON (``EngineArgs.speculative_config``),
    as a dict with ``method`` and ``num_speculative_tokens``.

    Raises:
        ValueError: one line, for text that is not a JSON object, a missing
            ``method`` or ``num_speculative_tokens``, or a key not accepted.
    """
    if not isinstance(text, str):
        raise ValueError(
            f"--speculative-config must be vLLM's JSON text, got {type(text).__name__} {text!r}"
        )
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        raise ValueError(f"--speculative-config is not JSON: {why}") from None
    if not isinstance(d, dict):
        raise ValueError(
            "--speculative-config must be a JSON object, e.g. "
            '\'{"method": "ngram", "num_speculative_tokens": 3}\''
        )
    for key in d:
        if key not in ACCEPTED_KEYS:
            raise ValueError(
                f"--speculative-config key {key!r} is not simulated (accepted: "
                f"{', '.join(ACCEPTED_KEYS)})"
            )
    for key in ("method", "num_speculative_tokens"):
        if key not in d:
            raise ValueError(f"--speculative-config needs {key!r}")
    return d


def speculation_from(
    config: str | None, acceptance: str | float | tuple[float, ...] | None, seed: int = 0
) -> Speculation | None:
    """The ``Speculation`` of --speculative-config, --spec-acceptance (text,
    one number, or the rates themselves) and --spec-seed (a sweep spec's
    ``speculative_config``, ``spec_acceptance``, ``spec_seed``); None without
    a config.

    Raises:
        ValueError: one line, for malformed JSON, a method not simulated,
            num_speculative_tokens out of range, a missing or bad acceptance.
    """
    if config is None:
        if acceptance is not None:
            raise ValueError(
                "--spec-acceptance needs --speculative-config (speculative decoding is off "
                "without it)"
            )
        return None
    d = parse_speculative_config(config)
    if acceptance is None:
        raise ValueError(
            "--speculative-config needs --spec-acceptance (vLLM's logged per-position "
            "acceptance rates, or one rate): acceptance depends on the text, which a plan lacks"
        )
    if isinstance(acceptance, tuple):
        rates = acceptance
    elif isinstance(acceptance, int | float) and not isinstance(acceptance, bool):
        rates = (float(acceptance),)
    else:
        rates = parse_acceptance(str(acceptance))
    lookup = (d.get("prompt_lookup_min"), d.get("prompt_lookup_max"))
    return Speculation(
        str(d["method"]), d["num_speculative_tokens"], rates, seed, lookup, d.get("model")
    )


LOG_ROUNDING = 0.0005  # the log prints each rate to 3 decimals (``f"{p:.3f}"``)
# vLLM 0.33's SpecDecodingLogging.log line (``vllm/v1/spec_decode/metrics.py``).
_LOG_LINE = re.compile(
    r"SpecDecoding metrics: .*?Drafted: (\d+) tokens, "
    r"Per-position acceptance rate: ([0-9., ]+?), Avg Draft acceptance rate"
)


def acceptance_from_log(path: Path) -> tuple[tuple[float, ...], int, int]:
    """vLLM's per-position acceptance rates fitted from a server log: every
    "SpecDecoding metrics" line (``SpecDecodingLogging.log``, one per logging
    interval) averaged position by position, each weighted by its drafted
    tokens (the line's own count of verified drafts is not logged; drafted
    tokens are it times the drafts per proposal). Returns (rates, lines
    read, drafted tokens).

    Raises:
        ValueError: one line, for an unreadable file, no such line, lines
            with different draft counts, or no drafted tokens.
    """
    check_readable(Path(path), "--spec-acceptance-log", MAX_SMALL_FILE_BYTES)
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        raise ValueError(f"--spec-acceptance-log {path}: {e.strerror or e}") from None
    try:
        rows = [(int(m[1]), [float(x) for x in m[2].split(",")]) for m in _LOG_LINE.finditer(text)]
    except ValueError:
        raise ValueError(f"--spec-acceptance-log {path}: a rate that is not a number") from None
    if not rows:
        raise ValueError(
            f"--spec-acceptance-log {path}: no 'SpecDecoding metrics' line (vLLM logs one per "
            "interval when speculative decoding runs)"
        )
    if len({len(r) for _, r in rows}) > 1:
        raise ValueError(f"--spec-acceptance-log {path}: its lines give different draft counts")
    for _, r in rows:
        if any(not 0.0 <= x <= 1.0 for x in r) or any(
            b > a + LOG_ROUNDING for a, b in zip(r, r[1:], strict=False)
        ):
            shown = ", ".join(f"{x:.3f}" for x in r)
            raise ValueError(
                f"--spec-acceptance-log {path}: a line's per-position rates are not non-increasing "
                f"rates in [0, 1]: {shown}"
            )
    drafted = sum(n for n, _ in rows)
    if drafted == 0:
        raise ValueError(f"--spec-acceptance-log {path}: no drafted tokens")
    k = len(rows[0][1])
    rates = tuple(sum(n * r[j] for n, r in rows) / drafted for j in range(k))
    # each line's rates are printed to 3 decimals, so a later position may
    # print up to LOG_ROUNDING above the one before: cap it there
    return tuple(min(rates[: j + 1]) for j in range(k)), len(rows), drafted


def parse_acceptance(text: str) -> tuple[float, ...]:
    """``--spec-acceptance``: one rate or comma-separated per-position rates.

    Raises:
        ValueError: one line for text that is not numbers.
    """
    try:
        vals = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"--spec-acceptance must be a rate or comma-separated rates in [0, 1], got {text!r}"
        ) from None
    return vals


@njit(cache=True, inline="always")
def _mix(z):  # noqa: ANN001, ANN202 (jitted: uint64 -> uint64)
    """splitmix64's finalizer on a uint64."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_M2)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_M3)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def accepted_drafts(seed, r, nout, drafts, thr):  # noqa: ANN001, ANN201 (jitted ints -> int)
    """Drafts accepted (a leading run, 0..``drafts``) for request ``r`` (int)
    verifying ``drafts`` draft tokens when it has ``nout`` output tokens, under
    the conditional thresholds ``thr`` ((MAX_SPEC_TOKENS,) int64 of 2^53,
    ``Speculation.thresholds``) and ``seed``. Pure; raises nothing."""
    base = (
        np.uint64(seed) * np.uint64(_M1)
        + np.uint64(r) * np.uint64(_M2)
        + np.uint64(nout) * np.uint64(_M3)
    )
    a = 0
    for j in range(drafts):
        u = _mix(base + np.uint64(j + 1)) >> np.uint64(11)
        if np.int64(u) >= thr[j]:
            break
        a += 1
    return a


def accepted_drafts_py(seed: int, r: int, nout: int, drafts: int, thr: np.ndarray) -> int:
    """``accepted_drafts`` in plain Python integers (the reference engine's;
    tests require both to agree)."""

    def mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * _M2) & _MASK
        z = ((z ^ (z >> 27)) * _M3) & _MASK
        return z ^ (z >> 31)

    base = (seed * _M1 + r * _M2 + nout * _M3) & _MASK
    a = 0
    for j in range(drafts):
        if (mix((base + j + 1) & _MASK) >> 11) >= int(thr[j]):
            break
        a += 1
    return a
