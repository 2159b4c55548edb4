"""Workloads: the request arrays every simulation reads.

A ``Workload`` is three aligned arrays of length R, sorted by arrival:
arrival time (seconds, float64), prompt tokens (int32) and output tokens
(int32, used as ``max_tokens`` with EOS ignored). All configs of one kernel
call share it (common random numbers).

Synthetic conventions follow BLIS (``shared/docs/semantics.md``): constant
arrivals are ``i / rate`` for i = 1..R, and the Gaussian length is
``round(clamp(N(mean, stdev), min, max))`` (clamped, not resampled).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from planner import bounds
from planner.workload.front_end import front_end_rejects

if TYPE_CHECKING:
    pass

ARRIVALS = ("constant", "poisson", "gamma", "offline")
MAX_TOKENS = bounds.INT32_MAX  # token counts are int32 in the kernel
MAX_ARRIVAL_S = bounds.MAX_ARRIVAL_S  # ~31 years: keeps times in int64 nanoseconds
MAX_READ_END_NS = 2 * 10**18  # a read's end, ns: twice the last arrival's bound (int64 room)
LENGTH_KINDS = ("gaussian", "lognormal", "constant", "empirical")


MAX_TURNS = 10_000  # turns per session: each turn's prompt holds the whole history


def field_name(label: str, part: str) -> str:
    """The name of a length setting's ``part`` (stdev, min, max) as the user wrote
    it: ``--prompt-tokens-min`` for a CLI label, ``workload.prompt.min`` for a
    sweep-spec label, so messages name an option or field that exists."""
    return f"{label}-{part}" if label.startswith("--") else f"{label}.{part}"


class WorkloadError(ValueError):
    """A workload that cannot be simulated (bad parameters or a malformed file)."""


@dataclass(frozen=True)
class Workload:
    """R requests, sorted by arrival.

    Attributes:
        arrival_s: shape (R,), float64, seconds from the start of the run.
        prompt_tokens: shape (R,), int32, >= 1.
        output_tokens: shape (R,), int32, >= 1 (max_tokens; EOS ignored).
        name: a short label for tables and file metadata.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    name: str = "workload"
    priority: np.ndarray | None = None  # (R,) int; lower runs first (policy priority)
    # Shared prompt prefixes (prefix caching): request i shares its first
    # min(prefix_len[i], prompt_tokens[i]) tokens with every request of group
    # prefix_group[i]; -1 = no group. Both (R,) int32, or both None.
    prefix_group: np.ndarray | None = None
    prefix_len: np.ndarray | None = None
    # Block-hash traces (prefix caching, ``planner.workload.block_hashes``): request i's
    # prompt blocks of ``hash_block_size`` tokens carry the ids
    # hash_ids[hash_offsets[i]:hash_offsets[i + 1]], cdiv(prompt, hash_block_size)
    # of them (the last may cover a partial block); equal ids at equal
    # positions mean equal prefixes. hash_ids (H,) int64, hash_offsets (R + 1,)
    # int64, both or neither; hash_block_size > 0 with them.
    hash_ids: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    hash_block_size: int = 0
    # Multi-turn sessions (``sessions``): session[i] (R,) int32 >= 0 is request
    # i's session; a session's requests are its turns in index order, and each
    # turn is sent when the previous one has finished, plus the think time
    # (``SchedulerConfig.think_time_s``; ``planner/kernel/arrivals.py``). A
    # later turn's arrival_s is its session's start (a lower bound: its real
    # send time is found by the simulation). Turn k's tokens begin with turn
    # k - 1's prompt and output, so their blocks are shared (prefix caching).
    session: np.ndarray | None = None
    # Disaggregated decode side (``planner.kv_transfer``): remote[i] (R,) bool
    # says request i's prompt was prefilled elsewhere and its KV is loaded
    # (vLLM's ``kv_transfer_params.do_remote_prefill``); None: none is.
    remote: np.ndarray | None = None
    # Disaggregated prefill side (``planner.disagg``): read_end_ns[i] (R,) int64
    # is when (ns, the run's clock) the decode side's read of request i's KV
    # ends, -1 for a request no decode side reads; its blocks stay held from
    # its finish until then (vLLM's ``do_remote_decode``, NixlConnector's
    # ``delay_free_blocks``; ``planner/kernel/kv_send.py``). None: none is held.
    read_end_ns: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if n == 0:
            raise WorkloadError(f"{self.name}: the workload has no requests")
        if self.session is not None:
            self._check_sessions(n)
        if self.hash_ids is not None or self.hash_offsets is not None:
            self._check_hashes(n)
        if self.remote is not None and len(self.remote) != n:
            raise WorkloadError(f"{self.name}: remote array differs in length")
        if self.read_end_ns is not None:
            self._check_reads(n)
        if self.priority is not None and len(self.priority) != n:
            raise WorkloadError(f"{self.name}: priority array differs in length")
        if (self.prefix_group is None) != (self.prefix_len is None):
            raise WorkloadError(f"{self.name}: give both prefix_group and prefix_len, or neither")
        if self.prefix_group is not None:
            if len(self.prefix_group) != n or len(self.prefix_len) != n:
                raise WorkloadError(f"{self.name}: prefix arrays differ in length")
            if np.any(self.prefix_group < -1) or np.any(self.prefix_len < 0):
                raise WorkloadError(f"{self.name}: prefix groups must be >= -1, lengths >= 0")
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise WorkloadError(f"{self.name}: arrays differ in length")
        a = self.arrival_s
        if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > MAX_ARRIVAL_S):
            raise WorkloadError(f"{self.name}: arrival times must be in 0..{MAX_ARRIVAL_S:g} s")
        if np.any(np.diff(self.arrival_s) < 0):
            raise WorkloadError(f"{self.name}: arrival times must be sorted")
        if np.any(self.prompt_tokens < 1) or np.any(self.output_tokens < 1):
            raise WorkloadError(f"{self.name}: prompt and output tokens must be >= 1")

    def _check_reads(self, n: int) -> None:
        """Validate ``read_end_ns`` (see its field comment): R integers in
        -1..``MAX_READ_END_NS``, none on a request whose own KV is remote."""
        r = np.asarray(self.read_end_ns)
        if len(r) != n or r.dtype.kind not in "iu" or np.any(r < -1) or np.any(r > MAX_READ_END_NS):
            raise WorkloadError(
                f"{self.name}: read_end_ns must be R integers in -1..{MAX_READ_END_NS} "
                "(ns; -1: not held)"
            )
        if self.remote is not None and np.any((r >= 0) & np.asarray(self.remote, dtype=bool)):
            raise WorkloadError(f"{self.name}: a request cannot both load its KV and be read")

    def _check_sessions(self, n: int) -> None:
        """Validate ``session`` (see its field comment)."""
        if len(self.session) != n or np.any(self.session < 0):
            raise WorkloadError(f"{self.name}: session ids must be R integers >= 0")
        if self.prefix_group is not None or self.hash_ids is not None:
            raise WorkloadError(
                f"{self.name}: sessions share their history by themselves: give no prefix "
                "groups or hash ids with them"
            )

    def next_turn(self) -> np.ndarray:
        """(R,) int32: the index of each request's next turn in its session, -1
        for none (and for every request without sessions)."""
        out = np.full(self.num_requests, -1, dtype=np.int32)
        if self.session is None:
            return out
        order = np.lexsort((np.arange(self.num_requests), self.session))
        same = self.session[order[1:]] == self.session[order[:-1]]
        out[order[:-1][same]] = order[1:][same]
        return out

    def _check_hashes(self, n: int) -> None:
        """Validate the block-hash arrays (see the field comments)."""
        ids, off, hb = self.hash_ids, self.hash_offsets, self.hash_block_size
        if ids is None or off is None:
            raise WorkloadError(f"{self.name}: give both hash_ids and hash_offsets, or neither")
        if self.prefix_group is not None:
            raise WorkloadError(
                f"{self.name}: block hash ids and prefix groups both describe shared prefixes: "
                "give one or the other"
            )
        if not 1 <= hb <= MAX_TOKENS:
            raise WorkloadError(f"{self.name}: the hash block size must be in 1..{MAX_TOKENS}")
        if len(off) != n + 1 or off[0] != 0 or off[-1] != len(ids) or np.any(np.diff(off) < 0):
            raise WorkloadError(f"{self.name}: hash_offsets must be R + 1 rising offsets")
        want = -(-self.prompt_tokens.astype(np.int64) // hb)
        bad = np.flatnonzero(np.diff(off) != want)
        if len(bad):
            i = int(bad[0])
            raise WorkloadError(
                f"{self.name}: request {i} has {int(off[i + 1] - off[i])} hash ids for "
                f"{int(self.prompt_tokens[i])} prompt tokens; want one per {hb}-token block "
                f"({int(want[i])})"
            )

    @property
    def num_requests(self) -> int:
        return len(self.arrival_s)

    def due_by(self, until_s: float) -> Workload:
        """The requests due by ``until_s`` (seconds; ``arrival_s <= until_s``,
        arrivals being sorted: the first n), every per-request array cut to
        them, block hashes included. A later session turn whose session starts
        by then is kept. Raises WorkloadError when no request is due."""
        n = int(np.searchsorted(self.arrival_s, until_s, side="right"))
        if n == 0:
            raise WorkloadError(f"{self.name}: no request is due by {until_s:g} s")
        if n == self.num_requests:
            return self

        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[:n]

        off = self.hash_offsets
        return replace(
            self,
            arrival_s=self.arrival_s[:n],
            prompt_tokens=self.prompt_tokens[:n],
            output_tokens=self.output_tokens[:n],
            priority=cut(self.priority),
            prefix_group=cut(self.prefix_group),
            prefix_len=cut(self.prefix_len),
            hash_ids=None if off is None else self.hash_ids[: off[n]],
            hash_offsets=None if off is None else off[: n + 1],
            session=cut(self.session),
        )

    def rejected(self, max_model_len: int | np.ndarray) -> np.ndarray:
        """Requests the front end refuses (``front_end.front_end_rejects``:
        prompt >= ``max_model_len`` or output > ``max_model_len``; the
        kernel's ``step._arrivals``): (R,) bool for an int, (C, R) for a (C,)
        array of them."""
        mml, prompt, output = self._against(max_model_len)
        return front_end_rejects.py_func(prompt, output, mml)

    def cut(self, max_model_len: int | np.ndarray) -> np.ndarray:
        """Requests the front end admits with fewer output tokens than asked:
        prompt + output > ``max_model_len`` (vLLM 0.33's ``get_max_tokens``
        clamps max_tokens to ``max_model_len - prompt``; see
        ``front_end.front_end_rejects``). Shapes as ``rejected``."""
        mml, prompt, output = self._against(max_model_len)
        return (prompt + output > mml) & ~self.rejected(max_model_len)

    def _against(self, max_model_len: int | np.ndarray) -> tuple[np.ndarray, ...]:
        """(max_model_len, prompt, output) as int64, broadcastable: (C, 1)
        against (1, R) for a (C,) array of lengths."""
        mml = np.asarray(max_model_len, dtype=np.int64)
        prompt = self.prompt_tokens.astype(np.int64)
        output = self.output_tokens.astype(np.int64)
        if mml.ndim == 0:
            return mml, prompt, output
        return mml[:, None], prompt[None, :], output[None, :]

    def request_tokens(self, max_model_len: int | None = None) -> np.ndarray:
        """Tokens each request reaches, shape (R',) int64: prompt + output, capped
        at ``max_model_len`` (``check_stop`` ends a request there), over the
        requests the front end admits (prompt < max_model_len; vLLM rejects the
        rest). All R requests, uncapped, when ``max_model_len`` is None."""
        total = self.prompt_tokens.astype(np.int64) + self.output_tokens
        if max_model_len is None:
            return total
        return np.minimum(total[~self.rejected(max_model_len)], max_model_len)

    def mean_request_tokens(self, max_model_len: int | None = None) -> float:
        """The L of the analytic KV-safe limit: mean of ``request_tokens``
        (``max_model_len`` itself when no request is admitted)."""
        t = self.request_tokens(max_model_len)
        return float(t.mean()) if len(t) else float(max_model_len or 1)

    def fingerprint(self) -> str:
        """sha256 (first 16 hex digits) of the arrays (optional ones when given)."""
        h = hashlib.sha256()
        for a in (self.arrival_s, self.prompt_tokens, self.output_tokens):
            h.update(np.ascontiguousarray(a).tobytes())
        for name in ("priority", "prefix_group", "prefix_len", "hash_ids", "hash_offsets",
                     "session"):  # fmt: skip
            a = getattr(self, name)
            if a is not None:
                h.update(name.encode())
                h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        if self.hash_ids is not None:
            h.update(f"hash_block_size={self.hash_block_size}".encode())
        return h.hexdigest()[:16]


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution.

    kind: ``gaussian`` (BLIS: round(clamp(N(mean, stdev), min, max))),
    ``lognormal`` (mean and stdev of the lengths themselves, then clamped and
    rounded), ``constant`` (always ``mean``) or ``empirical`` (drawn with
    replacement from ``values``).
    """

    kind: str = "gaussian"
    mean: float = 300.0
    stdev: float = 0.0
    min: int = 1
    max: int = 1 << 30
    values: tuple[int, ...] = ()
    label: str = "length"  # names the option in error messages, e.g. "--prompt-tokens"

    def __post_init__(self) -> None:
        lb = self.label
        if self.kind not in LENGTH_KINDS:
            raise WorkloadError(f"{lb}: kind must be one of {LENGTH_KINDS}, got {self.kind!r}")
        if self.kind == "empirical":
            if len(self.values) == 0 or min(self.values) < 1:
                raise WorkloadError(f"{lb}: empirical lengths need values >= 1")
            return
        if not (1 <= self.mean <= MAX_TOKENS):
            raise WorkloadError(f"{lb}: mean must be in 1..{MAX_TOKENS}, got {self.mean}")
        if not (0 <= self.stdev < float("inf")):
            raise WorkloadError(
                f"{field_name(lb, 'stdev')} must be finite and >= 0, got {self.stdev}"
            )
        if not (1 <= self.min <= self.max <= MAX_TOKENS):
            raise WorkloadError(f"{lb}: needs 1 <= min <= max, got min {self.min}, max {self.max}")
        if not (self.min <= self.mean <= self.max):
            raise WorkloadError(
                f"{lb}: mean {self.mean:g} lies outside its bounds {self.min}..{self.max}; "
                f"lengths would be clamped to the bounds (set {field_name(lb, 'min')}/"
                f"{field_name(lb, 'max')})"
            )

    @property
    def random(self) -> bool:
        """Whether ``sample`` draws anything: not for ``constant``, a stdev of
        0, bounds that leave one length, or one distinct empirical value."""
        if self.kind == "empirical":
            return len(set(self.values)) > 1
        return self.kind != "constant" and self.stdev > 0 and self.min < self.max

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw n lengths: shape (n,), int32."""
        if self.kind == "empirical":
            return rng.choice(np.asarray(self.values, dtype=np.int32), size=n)
        if self.kind == "constant":
            x = np.full(n, self.mean)
        elif self.kind == "gaussian":
            x = rng.normal(self.mean, self.stdev, size=n)
        else:
            if self.stdev == 0:
                x = np.full(n, self.mean)
            else:
                s2 = np.log1p((self.stdev / self.mean) ** 2)
                x = rng.lognormal(np.log(self.mean) - s2 / 2, np.sqrt(s2), size=n)
        return np.round(np.clip(x, self.min, self.max)).astype(np.int32)


# Scenario S1's length shapes (BLIS seed, ``shared/docs/scenarios.md`` S1): the
# defaults of ``plan run`` when the user gives no length option at all.
S1_PROMPT = LengthDist("gaussian", 300.0, 200.0, 200, 400)
S1_OUTPUT = LengthDist("gaussian", 3500.0, 3200.0, 3200, 3596)


def length_from_options(
    kind: str,
    mean: float | None,
    stdev: float | None,
    lo: int | None,
    hi: int | None,
    preset: LengthDist,
    label: str,
) -> LengthDist:
    """A length distribution from command-line options, without silent overrides.

    With none of ``mean``/``stdev``/``lo``/``hi`` given, ``preset`` (S1's shape)
    applies whole. Once any is given, the others take neutral values instead of
    the preset's: mean = the preset's mean, stdev 0, bounds 1..MAX_TOKENS (no
    clamping), so that a preset bound never silently clamps a mean the user
    chose. ``constant`` lengths take no stdev or bounds.

    Raises:
        WorkloadError: a stdev or bound given with ``constant``; a mean outside
            the bounds; any invalid value (see ``LengthDist``).
    """
    if kind == "constant":
        for name, v in (("-stdev", stdev), ("-min", lo), ("-max", hi)):
            if v is not None:
                raise WorkloadError(f"{label}{name} has no effect with --length-dist constant")
        m = preset.mean if mean is None else mean
        return LengthDist("constant", m, 0.0, 1, MAX_TOKENS, label=label)
    if mean is None and stdev is None and lo is None and hi is None:
        return replace(preset, kind=kind, label=label)
    return LengthDist(
        kind,
        preset.mean if mean is None else mean,
        0.0 if stdev is None else stdev,
        1 if lo is None else lo,
        MAX_TOKENS if hi is None else hi,
        label=label,
    )


def drawn_mean_warning(drawn: np.ndarray, dist: LengthDist, tolerance: float = 0.05) -> str:
    """A one-line warning when clamping to the bounds moved the drawn mean by more
    than ``tolerance`` (relative) from the requested one, else ''.

    ``drawn``: shape (R,), int32 token lengths sampled from ``dist``.
    """
    if dist.kind == "empirical" or len(drawn) == 0:
        return ""
    got = float(np.mean(drawn))
    if abs(got - dist.mean) <= tolerance * dist.mean:
        return ""
    return (
        f"{dist.label}: the drawn mean is {got:,.1f}, not {dist.mean:,.1f}: stdev "
        f"{dist.stdev:g} is clamped to the bounds {dist.min}..{dist.max}"
    )


def synthetic(
    num_requests: int,
    rate: float,
    prompt: LengthDist,
    output: LengthDist,
    arrival: str = "constant",
    seed: int = 0,
    gamma_cv: float = 1.0,
) -> Workload:
    """Generate a synthetic workload.

    Args:
        num_requests: R >= 1.
        rate: requests per second (> 0; ignored for ``offline``).
        prompt: the prompt-length distribution (tokens).
        output: the output-length distribution (tokens).
        arrival: ``constant`` (i/rate, the first at 1/rate, BLIS), ``poisson``,
            ``gamma`` (inter-arrival coefficient of variation ``gamma_cv``) or
            ``offline`` (everything at t = 0).
        seed: RNG seed (numpy PCG64); arrivals are drawn first, then prompts,
            then outputs.

    Raises:
        WorkloadError: on a bad parameter.
    """
    if num_requests < 1:
        raise WorkloadError(f"--num-requests must be >= 1, got {num_requests}")
    if arrival not in ARRIVALS:
        raise WorkloadError(f"--arrival must be one of {ARRIVALS}, got {arrival!r}")
    if arrival != "offline" and not (0 < rate < float("inf")):
        raise WorkloadError(f"--rate must be > 0 requests/s, got {rate}")
    if arrival == "gamma" and not (0 < gamma_cv < float("inf")):
        raise WorkloadError(f"gamma arrivals need a cv > 0, got {gamma_cv}")
    if seed < 0:
        raise WorkloadError(f"--seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    n = num_requests
    if arrival == "constant":
        t = np.arange(1, n + 1, dtype=np.float64) / rate
    elif arrival == "poisson":
        t = np.cumsum(rng.exponential(1.0 / rate, size=n))
    elif arrival == "gamma":
        shape = 1.0 / gamma_cv**2
        t = np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))
    else:
        t = np.zeros(n)
    name = f"synthetic {arrival} arrivals, {prompt.kind}/{output.kind} lengths"
    return Workload(t, prompt.sample(rng, n), output.sample(rng, n), name=name)


def sessions(
    num_sessions: int,
    turns: int,
    rate: float,
    message: LengthDist,
    output: LengthDist,
    arrival: str = "constant",
    seed: int = 0,
    gamma_cv: float = 1.0,
) -> Workload:
    """Multi-turn sessions: ``num_sessions`` sessions of ``turns`` turns each.

    Sessions start as ``synthetic``'s requests do (``arrival`` at ``rate``
    sessions per second; its first turn's message and output lengths are that
    request's). Turn k's prompt is the whole history plus a new message:
    prompt_k = prompt_(k-1) + output_(k-1) + message_k, with the messages and
    outputs of turns 2.. drawn from ``message`` and ``output`` (numpy PCG64
    seeded with ``seed`` + 2, so the first turns equal ``synthetic``'s).
    Requests are session-major (session s's turn k is request s x turns + k)
    and carry ``Workload.session``; each later turn is sent when the previous
    one ends, plus the think time (a per-configuration setting).

    Raises:
        WorkloadError: on a bad parameter, or a prompt that grows past
            ``MAX_TOKENS``.
    """
    if not 1 <= turns <= MAX_TURNS:
        raise WorkloadError(f"--turns must be in 1..{MAX_TURNS}, got {turns}")
    first = synthetic(num_sessions, rate, message, output, arrival, seed, gamma_cv)
    if turns == 1:
        return first
    rng = np.random.default_rng(seed + 2)
    n_more = num_sessions * (turns - 1)
    msg = np.empty((num_sessions, turns), dtype=np.int64)
    out = np.empty((num_sessions, turns), dtype=np.int64)
    msg[:, 0], out[:, 0] = first.prompt_tokens, first.output_tokens
    msg[:, 1:] = message.sample(rng, n_more).reshape(num_sessions, turns - 1)
    out[:, 1:] = output.sample(rng, n_more).reshape(num_sessions, turns - 1)
    history = np.concatenate([np.zeros((num_sessions, 1), np.int64), np.cumsum(msg + out, 1)], 1)
    prompt = history[:, :-1] + msg  # everything before this turn, plus its message
    if prompt.max() > MAX_TOKENS:
        raise WorkloadError(
            f"--turns {turns}: prompts grow to {int(prompt.max()):,} tokens, beyond "
            f"{MAX_TOKENS:,}; use fewer turns or shorter messages"
        )
    name = f"synthetic sessions ({turns} turns), {arrival} arrivals, {message.kind}/{output.kind}"
    return Workload(
        np.repeat(first.arrival_s, turns),
        prompt.reshape(-1).astype(np.int32),
        out.reshape(-1).astype(np.int32),
        name=name,
        session=np.repeat(np.arange(num_sessions, dtype=np.int32), turns),
    )


def seed_acts(
    arrival: str | None, prompt: LengthDist | None, output: LengthDist | None,
    groups: int, share: float,
) -> bool:  # fmt: skip
    """Whether a workload seed changes anything: poisson or gamma
    ``arrival``s, a ``random`` prompt or output length (None: a trace's own),
    or a prefix draw that is not all one group (``with_shared_prefixes``:
    0 < ``share`` < 1, or more than one of ``groups``)."""
    lengths = any(d is not None and d.random for d in (prompt, output))
    prefixes = groups > 0 and share > 0 and (share < 1 or groups > 1)
    return arrival in ("poisson", "gamma") or lengths or prefixes


def with_shared_prefixes(
    wl: Workload, groups: int, prefix_len: int, share: float, seed: int = 0
) -> Workload:
    """Give a share of the requests a shared prompt prefix (for prefix caching).

    Each request independently joins, with probability ``share``, one of
    ``groups`` groups drawn uniformly; members of a group share their first
    ``min(prefix_len, prompt)`` prompt tokens (a system prompt, say). Draws come
    from their own stream (numpy PCG64 seeded with ``seed`` + 1), so the base
    workload is unchanged. All three zero returns ``wl``.

    Raises:
        WorkloadError: on a negative or too large count or length, a share
            outside [0, 1], some but not all of the three set, or a workload
            that already has prefix groups (a trace's prefix columns).
    """
    for name, v in (("--prefix-groups", groups), ("--prefix-len", prefix_len)):
        if not 0 <= v <= MAX_TOKENS:
            raise WorkloadError(f"{name} must be an integer in 0..{MAX_TOKENS}, got {v}")
    if not (0.0 <= share <= 1.0):
        raise WorkloadError(f"--prefix-share must be in [0, 1], got {share}")
    given = (groups > 0, prefix_len > 0, share > 0)
    if any(given) and not all(given):
        raise WorkloadError(
            "shared prefixes need --prefix-groups, --prefix-len and --prefix-share all > 0, "
            f"got {groups}, {prefix_len}, {share:g}"
        )
    if not any(given):
        return wl
    if wl.hash_ids is not None:
        raise WorkloadError(
            f"{wl.name}: the trace has block hash ids; a prefix draw (prefix groups, length "
            "and share) would replace them: give one or the other"
        )
    if wl.prefix_group is not None:
        raise WorkloadError(
            f"{wl.name}: the trace has prefix_group/prefix_len columns; a prefix draw "
            "(prefix groups, length and share) would replace them: give one or the other"
        )
    rng = np.random.default_rng(seed + 1)
    n = wl.num_requests
    member = rng.random(n) < share
    group = np.where(member, rng.integers(0, groups, n), -1).astype(np.int32)
    return replace(
        wl,
        prefix_group=group,
        prefix_len=np.full(n, prefix_len, dtype=np.int32),
        name=f"{wl.name}, {share:g} sharing {prefix_len}-token prefixes in {groups} groups",
    )


def priorities_unread(wl: Workload) -> bool:
    """Whether ``wl`` carries no distinct priorities (none, or all equal).
    Policy or victim ``priority`` then orders by arrival alone: with distinct
    arrival times, ``waiting`` is in arrival order as under FCFS, and
    ``running``, where FCFS appends admissions and re-admits the preempted
    first (``Scheduler.schedule``), stays in arrival order, so the largest
    (priority, arrival) is its tail, FCFS's victim (checked on random runs in
    ``tests/test_no_silent_overrides.py``); tied arrivals (offline, coarse
    timestamps) or dynamic sends (closed loop, sessions) can differ, so this
    is a warning, not a refusal (``planner.workload_checks.unused_field_warnings``)."""
    p = wl.priority
    return p is None or len(p) == 0 or bool(np.all(p == p[0]))
