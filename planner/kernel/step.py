"""The jitted step loop: C scheduler configurations against one workload.

Each configuration runs the vLLM v1 scheduler step by step in simulated time:

- ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``): running phase,
  then waiting phase, chunked prefill under ``max_num_batched_tokens``.
- ``KVCacheManager.allocate_slots`` (``vllm/v1/core/kv_cache_manager.py``):
  all-or-nothing allocation, the whole-sequence gate, the watermark.
- ``Scheduler._preempt_request``: recompute preemption of the tail of
  ``running``, prepended to ``waiting``.
- ``Scheduler.update_from_output`` and ``check_stop``
  (``vllm/v1/core/sched/utils.py``): a token is sampled only when the step's
  chunk reached the end of the known tokens; finished requests free at once.

The plain-Python ``planner.reference`` engine implements the same rules one
class at a time; tests require both to agree step for step.

- ``AsyncScheduler`` (``vllm/v1/core/sched/async_scheduler.py``) with
  ``EngineCore.step_with_batch_queue`` when ``ASYNC`` is set: step N+1 is
  scheduled before step N's output lands (``num_output_placeholders``,
  ``num_in_flight_tokens``, stale output of preempted requests).
- Prefix caching when ``CACHING`` is set (``prefix_cache.py``).

Both are vLLM defaults and both default off here (see the README). Time is
integer nanoseconds. Deliberate differences are named options (config
columns): ``PREEMPT`` (1 = BLIS restart, 2 = swap), ``STOP`` (1 =
max_servable bound), ``NULL`` (0 = BLIS pool without a null block), ``GATE``
(0 = gate off), and the mitigations of ``policies.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from planner import config as K
from planner.capacity import blocks_for_tokens, cdiv, stop_length, usable_blocks
from planner.kernel import prefix_cache as PC
from planner.kernel import state as S
from planner.kernel.policies import (
    VANILLA,
    adaptive_cap_next,
    pick_victim,
    precedes,
    projected_blocks,
)
from planner.latency import LINEAR, ROOFLINE, step_time_ns

INT64_MAX = np.iinfo(np.int64).max


@njit(cache=True, inline="always")
def _preempt(v, restart, ncomp, nout, held, status, npre):
    """``Scheduler._preempt_request``: free the victim's blocks, num_computed_tokens
    = 0, count it. ``restart`` (BLIS) also discards its generated tokens.
    Returns the blocks freed."""
    freed = held[v]
    held[v] = 0
    ncomp[v] = 0
    npre[v] += 1
    status[v] = S.WAITING
    if restart:
        nout[v] = 0
    return freed


@njit(cache=True)
def _enqueue_sorted(r, wq, wh, wl, priority, entry_ns):
    """Insert r into the waiting ring in priority order (``PriorityRequestQueue``);
    equal keys keep their order. Returns the new length."""
    R = wq.shape[0]
    j = wl
    while j > 0 and precedes(r, wq[(wh + j - 1) % R], priority, entry_ns):
        wq[(wh + j) % R] = wq[(wh + j - 1) % R]
        j -= 1
    wq[(wh + j) % R] = r
    return wl + 1


@njit(cache=True, inline="always")
def _log(rlog, nlog, step, r, value, kind):
    """Append one event (``state.EV_*``) if the log has room; returns the count."""
    if nlog < rlog.shape[0]:
        rlog[nlog, 0] = step
        rlog[nlog, 1] = r
        rlog[nlog, 2] = value
        rlog[nlog, 3] = kind
    return nlog + 1


@njit(cache=True)
def _release(
    r, held, table, slot_of, slots, n_free_slots, ncached, ref, hkey, fq_next, fq_prev, pc
):
    """Prefix caching: free r's blocks (prefix_cache.free_blocks) and its table
    row. Returns (blocks back in the free queue, free rows)."""
    freed = PC.free_blocks(table, slot_of[r], held[r], ref, hkey, fq_next, fq_prev, pc)
    slots[n_free_slots] = slot_of[r]
    slot_of[r] = -1
    ncached[r] = 0
    return freed, n_free_slots + 1


@njit(cache=True)
def _finish(
    r, t, caching, held, status, finish_ns, table, slot_of, slots, n_free_slots, ncached, ref,
    hkey, fq_next, fq_prev, pc,
):  # fmt: skip
    """``check_stop`` ended r at time t (ns): free its blocks (``_free_request``).
    Returns (blocks back in the free queue, free table rows)."""
    freed = held[r]
    if caching and slot_of[r] >= 0:
        freed, n_free_slots = _release(
            r, held, table, slot_of, slots, n_free_slots, ncached, ref, hkey, fq_next, fq_prev, pc
        )
    held[r] = 0
    status[r] = S.FINISHED
    finish_ns[r] = t
    return freed, n_free_slots


@njit(cache=True)
def _remove_waiting(r, wq, wh, wl):
    """Remove r from the waiting ring, keeping the others' order. Returns the length."""
    R = wq.shape[0]
    m = 0
    for j in range(wl):
        x = wq[(wh + j) % R]
        if x != r:
            wq[(wh + m) % R] = x
            m += 1
    return m


@njit(cache=True)
def _head_blocked(r, ntok, c0, n_run, free, seqs, mnbt, thr, wm_blocks, gate, mml, bs):
    """Whether the waiting phase would refuse request ``r`` (the head) now.

    Used only by the decode fast path; the rules are the waiting phase's."""
    if n_run >= seqs:
        return True
    budget = mnbt - n_run
    if budget <= 0:
        return True
    num_new = ntok - c0
    if 0 < thr < num_new:
        num_new = thr
    if num_new > budget:
        num_new = budget
    wm = wm_blocks if n_run > 0 else 0
    if gate and blocks_for_tokens(ntok, mml, bs) + wm > free:
        return True
    return blocks_for_tokens(c0 + num_new, mml, bs) + wm > free


@njit(cache=True)
def _drop_finished(run, n_run, status):
    """Remove finished requests from ``running``, keeping order (``remove_all``)."""
    m = 0
    for i in range(n_run):
        r = run[i]
        if status[r] == S.RUNNING:
            run[m] = r
            m += 1
    return m


@njit(cache=True)
def _blocks_needed_after(k, run, n_run, ncomp, held, mml, bs):
    """New blocks the running decodes need over the next k steps."""
    total = 0
    for i in range(n_run):
        r = run[i]
        nb = blocks_for_tokens(ncomp[r] + k, mml, bs) - held[r]
        if nb > 0:
            total += nb
    return total


@njit(cache=True)
def _decode_run_length(
    cfg, cfgf, run, n_run, prompt, nout, ncomp, max_tokens, held, hw, hist, stop_len,
    free, head, next_entry, clock, seqs, steps_left, async_, ph, infl,
):  # fmt: skip
    """How many upcoming steps are provably identical decode-only steps.

    They are when every running request decodes one token, the waiting head
    stays refused (its admission test only gets harder as blocks are used),
    no request arrives that could become the head (``next_entry``, ns, or
    INT64_MAX when arrivals cannot matter) and no allocation fails.
    The run may end with the step in which the first requests finish.
    Async (``async_``): every running request must have exactly the previous
    step's sampled token in flight (``ph == infl == 1``); the run then ends
    before any request's last token is scheduled, so nothing finishes in it.
    Returns (k, elapsed ns, duration of the first step); k < 2 means "take a
    normal step".
    """
    bs = cfg[K.BS]
    mml = cfg[K.MML]
    roofline = cfg[K.LAT_KIND] == ROOFLINE
    kf = INT64_MAX
    need1 = 0
    ctx0 = 0
    proj = 0
    admission = cfg[K.ADMISSION]
    periodic = True
    for j in range(bs + 1):
        hist[j] = 0
    for i in range(n_run):
        r = run[i]
        ntok = prompt[r] + nout[r]
        if async_:
            if ph[r] != 1 or infl[r] != 1 or ncomp[r] != ntok:
                return 0, 0, 0
            f = min(max_tokens[r] - nout[r], stop_len - ntok) - 1
        else:
            if ntok - ncomp[r] != 1:
                return 0, 0, 0
            f = min(max_tokens[r] - nout[r], stop_len - ntok)
        if roofline and hw[r] > ncomp[r]:
            return 0, 0, 0  # re-decode waste is only attributed step by step
        ctx0 += ncomp[r]
        if admission != VANILLA:
            proj += projected_blocks(np.int64(r), admission, prompt, max_tokens, stop_len, mml, bs)
        if f < kf:
            kf = f
        # First of the next steps that needs a new block; then one every bs steps.
        j1 = held[r] * bs - ncomp[r] + 1
        if j1 == 1:
            need1 += 1
        if 1 <= j1 <= bs:
            hist[j1] += 1
        else:
            periodic = False
    if kf < 2 or need1 > free:
        return 0, 0, 0
    kmax = min(kf, steps_left)
    if kmax < 2:
        return 0, 0, 0
    if head >= 0 and not _head_blocked(
        head, prompt[head] + nout[head], ncomp[head], n_run, free - need1, seqs, cfg[K.MNBT],
        cfg[K.THR], cfg[K.WM_BLOCKS], cfg[K.GATE] != 0, mml, bs,
    ):  # fmt: skip
        # Projected admission can still refuse it; the projection is fixed
        # while nothing is admitted or finishes.
        usable = usable_blocks(cfg[K.N], cfg[K.NULL] != 0)
        p_h = projected_blocks(np.int64(head), admission, prompt, max_tokens, stop_len, mml, bs)
        if admission == VANILLA or proj + p_h <= usable:
            return 0, 0, 0
    if periodic:
        # Each request needs one block per bs steps: after q whole periods q*n
        # blocks are gone, and the (rem+1)-th smallest first-need step fails.
        q = free // n_run
        rem = free % n_run
        cum = 0
        v = bs
        for j in range(1, bs + 1):
            cum += hist[j]
            if cum > rem:
                v = j
                break
        kmax = min(kmax, q * bs + v - 1)
    elif _blocks_needed_after(kmax, run, n_run, ncomp, held, mml, bs) > free:
        lo = 1
        hi = kmax
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _blocks_needed_after(mid, run, n_run, ncomp, held, mml, bs) <= free:
                lo = mid
            else:
                hi = mid
        kmax = lo
    # Step j (from 0) decodes after ctx0 + n*j cached tokens; steps after the
    # first must start before the next relevant arrival and the horizon.
    limit = min(next_entry, cfg[K.HORIZON_NS])
    ip = cfg[K.B0 : K.B2 + 1]
    elapsed = 0
    first = 0
    k = 0
    while k < kmax:
        if k > 0 and clock + elapsed >= limit:
            break
        kv = ctx0 + n_run * (k + 1)
        dt = step_time_ns(cfg[K.LAT_KIND], ip, cfgf, np.int64(0), n_run, kv, kv)
        if k == 0:
            first = dt
        elapsed += dt
        k += 1
    if k < 2:
        return 0, 0, 0
    return k, elapsed, first


@njit(cache=True)
def _apply_decode_run(
    k, elapsed, first_dt, clock, share, bs, mml, stop_len, run, n_run, prompt,
    nout, ncomp, max_tokens, held, hw, status, first_ns, finish_ns, async_,
):  # fmt: skip
    """Advance every running request by k decode steps; finish those that stop
    at the end of step k. ``share``: waste per re-decoded token (ns). Async:
    the token in flight before the run lands at its start (a first token
    then counts at ``clock``), and one token is still in flight after it.
    Returns (blocks allocated, blocks freed, finished, blocks still held,
    recompute waste in ns)."""
    end = clock + elapsed
    used = 0
    alloc = 0
    freed = 0
    n_fin = 0
    waste = 0.0
    for i in range(n_run):
        r = run[i]
        c0 = ncomp[r]
        w = min(c0 + k, hw[r]) - c0
        if w > 0:
            waste += w * share
        ncomp[r] = c0 + k
        nout[r] += k
        if first_ns[r] < 0:
            first_ns[r] = clock if async_ else clock + first_dt
        if c0 + k > hw[r]:
            hw[r] = c0 + k
        if c0 + k > held[r] * bs:
            nb = blocks_for_tokens(c0 + k, mml, bs)
            alloc += nb - held[r]
            held[r] = nb
        if nout[r] >= max_tokens[r] or prompt[r] + nout[r] >= stop_len:
            freed += held[r]
            held[r] = 0
            status[r] = S.FINISHED
            finish_ns[r] = end
            n_fin += 1
        else:
            used += held[r]
    return alloc, freed, n_fin, used, waste


@njit(cache=True)
def simulate_one(
    cfg,
    cfgf,
    prompt,
    max_tokens,
    priority,
    group,
    shared_len,
    entry_ns,
    order,
    ncomp,
    nout,
    held,
    status,
    first_ns,
    finish_ns,
    npre,
    hw,
    run,
    wq,
    sched_tok,
    slist,
    out_i,
    out_f,
    trace,
    rlog,
    ph,
    infl,
    stale,
    plist,
    ptok,
    use_macro,
    check,
):
    """Simulate one configuration. Arrays are this config's rows (see ``state.State``).

    ``entry_ns[r]``: when request r becomes visible (arrival + queueing delay), ns.
    ``check``: count steps that break block conservation (costs one pass per step).
    ``order``: request indices sorted by entry time. Returns request-log entries.
    """
    R = prompt.shape[0]
    N = cfg[K.N]
    bs = cfg[K.BS]
    seqs = cfg[K.SEQS]
    mnbt = cfg[K.MNBT]
    mml = cfg[K.MML]
    thr = cfg[K.THR]
    wm_blocks = cfg[K.WM_BLOCKS]
    gate = cfg[K.GATE] != 0
    by_priority = cfg[K.POLICY] == 1
    victim = cfg[K.VICTIM]
    adapt_w = cfg[K.ADAPT_WINDOW]
    adapt_thr = cfg[K.ADAPT_THRESHOLD]
    adapt_step = cfg[K.ADAPT_STEP]
    window_end = adapt_w if adapt_w > 0 else INT64_MAX
    window_pre = np.int64(0)
    anti_k = cfg[K.ANTI_STARVATION]
    admission = cfg[K.ADMISSION]
    restart = cfg[K.PREEMPT] == 1
    swap = cfg[K.PREEMPT] == 2
    cpu_free = cfg[K.SWAP_CPU_BLOCKS]
    ns_per_block = cfg[K.SWAP_NS_PER_BLOCK]
    null_block = cfg[K.NULL] != 0
    horizon = cfg[K.HORIZON_NS]
    max_steps = cfg[K.MAX_STEPS]
    b0 = cfg[K.B0]
    b1 = cfg[K.B1]
    b2 = cfg[K.B2]
    lat_kind = cfg[K.LAT_KIND]
    ip = cfg[K.B0 : K.B2 + 1]
    usable = usable_blocks(N, null_block)
    stop_len = stop_length(mml, N, bs, null_block, cfg[K.STOP])
    async_ = cfg[K.ASYNC] != 0
    T = trace.shape[0]
    L = rlog.shape[0]
    macro = use_macro and T == 0 and L == 0
    skipbuf = np.empty(R if async_ else 1, dtype=np.int32)  # async: skipped waiting requests
    n_pend = 0  # async: requests of the step whose output is in flight
    n_stale = 0  # async: preempted requests whose stale output is still in flight
    hist = np.zeros(bs + 1, dtype=np.int64)  # fast path: first-need step histogram
    # Prefix caching (prefix_cache.py): block identities for running requests.
    caching = cfg[K.CACHING] != 0
    macro = macro and not caching
    longest = 0  # tokens a request can reach: bounds its block table
    if caching:
        for r in range(R):
            longest = max(longest, min(prompt[r] + max_tokens[r], mml))
    maxb = cdiv(longest, bs) + 1
    n_slots = min(seqs, R) if caching else 1
    table = np.empty((n_slots, maxb if caching else 1), dtype=np.int32)
    slots = np.arange(n_slots).astype(np.int32)  # stack of free table rows
    slot_of = np.full(R if caching else 1, -1, dtype=np.int32)
    ncached = np.zeros(R if caching else 1, dtype=np.int32)
    hits = np.empty(maxb if caching else 1, dtype=np.int32)
    ref, hkey, hnext, hprev, fq_next, fq_prev, pc, tkey, thead, ttail = PC.new_pool(
        N if caching else 1, null_block
    )
    n_free_slots = n_slots

    # np.int64(0), not 0: a literal 0 passed to a jitted helper compiles a
    # second specialisation of it (Literal[int](0)), doubling first-run compile time.
    free = usable
    min_free = free
    clock = np.int64(0)
    nxt = np.int64(0)
    n_run = np.int64(0)
    wh = np.int64(0)
    wl = np.int64(0)
    steps = np.int64(0)
    zero_steps = np.int64(0)
    finished = np.int64(0)
    rejected = np.int64(0)
    arrived = np.int64(0)
    preemptions = np.int64(0)
    busy = np.int64(0)
    prefill_tok = np.int64(0)
    decode_tok = np.int64(0)
    inv_err = np.int64(0)
    macro_steps = np.int64(0)
    waste = 0.0
    livelocked = np.int64(0)
    livelock_step = -1
    step_limit = np.int64(0)
    lone_r = -1
    lone_ntok = -1
    nlog = np.int64(0)

    while True:
        # Requests whose entry time has come join the tail of `waiting`;
        # the front end rejects prompts >= max_model_len.
        while nxt < R and entry_ns[order[nxt]] <= clock:
            r = order[nxt]
            nxt += 1
            arrived += 1
            if prompt[r] >= mml:
                status[r] = S.REJECTED
                rejected += 1
            else:
                status[r] = S.WAITING
                if by_priority:
                    wl = _enqueue_sorted(r, wq, wh, wl, priority, entry_ns)
                else:
                    wq[(wh + wl) % R] = r
                    wl += 1
        if n_run == 0 and wl == 0:
            n_pend = 0  # only finished requests can still have output in flight
            if nxt >= R:
                break
            clock = entry_ns[order[nxt]]
            continue
        if clock >= horizon:
            break
        if steps >= max_steps:
            step_limit = 1
            break
        if adapt_w > 0 and steps >= window_end:
            # Adaptive cap (policies.py): every window, cut on too many preemptions,
            # otherwise recover additively.
            seqs = adaptive_cap_next(
                seqs, cfg[K.SEQS], n_run, preemptions - window_pre, adapt_thr, adapt_step
            )
            window_pre = preemptions
            window_end = steps + adapt_w

        # ---- Decode fast path: k identical decode-only steps in one jump. ----
        if macro and 0 < n_run <= mnbt and (not async_ or (n_pend == n_run and n_stale == 0)):
            arrivals_matter = wl == 0 or by_priority
            next_entry = entry_ns[order[nxt]] if (arrivals_matter and nxt < R) else INT64_MAX
            head = wq[wh] if wl > 0 else -1
            k, elapsed, first_dt = _decode_run_length(
                cfg, cfgf, run, n_run, prompt, nout, ncomp, max_tokens, held, hw, hist,
                stop_len, free, head, next_entry, clock, seqs,
                min(max_steps, window_end) - steps, async_, ph, infl,
            )  # fmt: skip
            if k >= 2:
                alloc, freed, n_fin, used, w = _apply_decode_run(
                    k, elapsed, first_dt, clock, b0 / n_run + b2, bs, mml, stop_len, run,
                    n_run, prompt, nout, ncomp, max_tokens, held, hw, status, first_ns, finish_ns,
                    async_,
                )  # fmt: skip
                waste += w
                free -= alloc
                if free < min_free:
                    min_free = free
                free += freed
                decode_tok += k * n_run
                if n_fin > 0:
                    n_run = _drop_finished(run, n_run, status)
                    finished += n_fin
                clock += elapsed
                busy += elapsed
                steps += k
                macro_steps += k
                if check and used + free != usable:
                    inv_err += 1
                continue

        # ---- One scheduler step (Scheduler.schedule). ----
        start = clock
        budget = mnbt
        n_sched = 0
        n_pre = 0
        n_adm = 0
        P = 0
        D = 0
        swap_ns = 0  # KV transfer time to and from the CPU tier this step
        attended = 0  # (query, key) pairs this step, for the roofline model
        kv_touched = 0  # KV tokens read or written this step
        cycle = False
        step = steps
        # long_prefill_token_threshold applies only when another request exists.
        thr_now = thr if n_run + wl > 1 else 0

        # Running phase: walk `running` in admission order while budget remains.
        i = 0
        while i < n_run and budget > 0:
            r = run[i]
            ntok = prompt[r] + nout[r]
            # Async: tokens in flight count as known (num_output_placeholders),
            # and a request whose last token is in flight is skipped.
            if async_ and ph[r] > 0 and ncomp[r] + 2 - ph[r] >= prompt[r] + max_tokens[r]:
                i += 1
                continue
            num_new = ntok + ph[r] - ncomp[r]
            if 0 < thr_now < num_new:
                num_new = thr_now
            if num_new > budget:
                num_new = budget
            if num_new > mml - 1 - ncomp[r]:
                num_new = mml - 1 - ncomp[r]
            if num_new <= 0:
                i += 1
                continue
            need = 0
            if ncomp[r] + num_new > held[r] * bs:  # skips the division on most decodes
                need = blocks_for_tokens(ncomp[r] + num_new, mml, bs) - held[r]
                if need < 0:
                    need = 0
            scheduled = True
            while need > free:
                # Preempt and retry. FCFS: the tail of `running`; priority: the
                # largest (priority, arrival); other victims: policies.py. A
                # victim that already ran this step gives its tokens back.
                vi = pick_victim(run, n_run, victim, anti_k, npre, ncomp, held, priority, entry_ns)
                v = run[vi]
                if vi < i:
                    i -= 1
                    m = 0
                    for j in range(n_sched):
                        if slist[j] != v:
                            slist[m] = slist[j]
                            m += 1
                    if m < n_sched:  # it was scheduled (async may have skipped it)
                        n_sched = m
                        n = sched_tok[v]
                        budget += n
                        if n == 1 and ncomp[v] == prompt[v] + nout[v] + ph[v] - 1:
                            D -= 1
                        else:
                            P -= n
                        attended -= n * ncomp[v] + n * (n + 1) // 2
                        kv_touched -= ncomp[v] + n
                for j in range(vi, n_run - 1):
                    run[j] = run[j + 1]
                n_run -= 1
                if swap and 0 < held[v] <= cpu_free:
                    # Swap preemption (policies.py): the KV moves to the CPU tier;
                    # held[v] now counts CPU blocks and num_computed_tokens stays.
                    free += held[v]
                    cpu_free -= held[v]
                    swap_ns += held[v] * ns_per_block
                    npre[v] += 1
                    status[v] = S.WAITING
                else:
                    if caching:
                        freed, n_free_slots = _release(
                            v, held, table, slot_of, slots, n_free_slots, ncached, ref, hkey,
                            fq_next, fq_prev, pc,
                        )  # fmt: skip
                        free += freed
                        _preempt(v, restart, ncomp, nout, held, status, npre)
                    else:
                        free += _preempt(v, restart, ncomp, nout, held, status, npre)
                # Async: output still in flight becomes stale (delivered, but it
                # no longer advances the request's counters).
                if infl[v] > 0 and stale[v] == 0:
                    n_stale += 1
                elif infl[v] == 0 and stale[v] > 0:
                    n_stale -= 1
                stale[v] = infl[v]
                ph[v] = 0
                if by_priority:
                    wl = _enqueue_sorted(v, wq, wh, wl, priority, entry_ns)
                else:
                    wh = (wh - 1 + R) % R
                    wq[wh] = v
                    wl += 1
                n_pre += 1
                if L > 0:
                    nlog = _log(rlog, nlog, step, v, 0, S.EV_PREEMPT)
                if v == r:
                    scheduled = False
                    # Alone in the system with nothing left to arrive: the state
                    # after this preemption repeats the last one => a cycle.
                    if n_run == 0 and wl == 1 and nxt >= R:
                        vt = prompt[v] + nout[v]
                        if lone_r == v and lone_ntok == vt:
                            cycle = True
                        lone_r = v
                        lone_ntok = vt
                    break
            if not scheduled:
                if by_priority:
                    continue  # the lowest-priority request went; later ones may fit
                break
            free -= need
            # Prefix caching: new blocks get identities, filled blocks get hashed
            # (most decode steps do neither).
            if caching and (need > 0 or min(ncomp[r] + num_new, ntok) >= (ncached[r] + 1) * bs):
                if need > 0:
                    PC.get_new_blocks(
                        need, table, slot_of[r], np.int64(held[r]), ref, hkey, hnext, hprev,
                        fq_next, fq_prev, pc, tkey, thead, ttail,
                    )  # fmt: skip
                ncached[r] = PC.cache_blocks(
                    r, table, slot_of[r], np.int64(ncached[r]), min(ncomp[r] + num_new, ntok), bs,
                    group, shared_len, R, maxb, hkey, hnext, hprev, tkey, thead, ttail,
                )  # fmt: skip
            held[r] += need
            sched_tok[r] = num_new
            slist[n_sched] = r
            n_sched += 1
            budget -= num_new
            if num_new == 1 and ncomp[r] == ntok + ph[r] - 1:
                D += 1
            else:
                P += num_new
            attended += num_new * ncomp[r] + num_new * (num_new + 1) // 2
            kv_touched += ncomp[r] + num_new
            i += 1

        # Waiting phase: skipped in a step that preempted; strict head-of-line,
        # except that async skips (and keeps in place) a preempted request whose
        # stale output is still in flight.
        if n_pre == 0:
            proj = 0  # projected-capacity admission: blocks held at completion
            if admission != VANILLA:
                for j in range(n_run):
                    proj += projected_blocks(
                        np.int64(run[j]), admission, prompt, max_tokens, stop_len, mml, bs
                    )
            n_skip = 0
            while wl > 0 and budget > 0:
                if n_run >= seqs:
                    break
                r = wq[wh]
                if stale[r] > 0:
                    skipbuf[n_skip] = r
                    n_skip += 1
                    wh = (wh + 1) % R
                    wl -= 1
                    continue
                ntok = prompt[r] + nout[r]
                c0 = ncomp[r]  # 0, or the KV kept on the CPU tier by a swap
                # Prefix-cache hits: full blocks already cached (get_computed_blocks);
                # those still in the free queue leave it when touched.
                nhit = 0
                evictable = 0
                wm = wm_blocks if n_run > 0 else 0
                if caching and c0 == 0:
                    # Only hits on blocks in use lower the gate, and only shared-prefix
                    # blocks can be in use: if even those cannot make it fit, skip
                    # the lookup (it has no side effects; the gate refuses anyway).
                    in_use_max = min(shared_len[r] // bs, PC.max_hit_blocks(ntok, bs))
                    if gate and blocks_for_tokens(ntok, mml, bs) - in_use_max + wm > free:
                        break
                    nhit, evictable = PC.lookup(
                        r, ntok, bs, group, shared_len, R, maxb, tkey, thead, ref, hits
                    )
                    c0 = nhit * bs
                num_new = ntok - c0
                if 0 < thr_now < num_new:
                    num_new = thr_now
                if num_new > budget:
                    num_new = budget
                if gate and max(blocks_for_tokens(ntok, mml, bs) - nhit, 0) + evictable + wm > free:
                    break
                total = blocks_for_tokens(c0 + num_new, mml, bs)
                need = total - nhit + evictable
                if need + wm > free:
                    break
                if admission != VANILLA:
                    p_r = projected_blocks(
                        np.int64(r), admission, prompt, max_tokens, stop_len, mml, bs
                    )
                    if proj + p_r > usable:
                        break
                    proj += p_r
                wh = (wh + 1) % R
                wl -= 1
                run[n_run] = r
                n_run += 1
                status[r] = S.RUNNING
                if L > 0:
                    nlog = _log(rlog, nlog, step, r, c0, S.EV_ADMIT)
                if ncomp[r] > 0:  # swap the KV back in
                    cpu_free += held[r]
                    swap_ns += held[r] * ns_per_block
                free -= need
                if caching:
                    n_free_slots -= 1
                    slot_of[r] = slots[n_free_slots]
                    PC.touch(hits, nhit, table, slot_of[r], ref, fq_next, fq_prev, pc)
                    PC.get_new_blocks(
                        total - nhit, table, slot_of[r], nhit, ref, hkey, hnext, hprev, fq_next,
                        fq_prev, pc, tkey, thead, ttail,
                    )  # fmt: skip
                    ncached[r] = PC.cache_blocks(
                        r, table, slot_of[r], nhit, min(c0 + num_new, ntok), bs, group,
                        shared_len, R, maxb, hkey, hnext, hprev, tkey, thead, ttail,
                    )  # fmt: skip
                    ncomp[r] = c0
                held[r] = total
                sched_tok[r] = num_new
                slist[n_sched] = r
                n_sched += 1
                budget -= num_new
                n_adm += 1
                if num_new == 1 and c0 == ntok - 1:
                    D += 1
                else:
                    P += num_new
                attended += num_new * c0 + num_new * (num_new + 1) // 2
                kv_touched += c0 + num_new
            for j in range(n_skip - 1, -1, -1):  # back in front, in their order
                wh = (wh - 1 + R) % R
                wq[wh] = skipbuf[j]
                wl += 1
        if L > 0:
            nlog = _log(rlog, nlog, step, n_run, wl, S.EV_STATE)
            nlog = _log(rlog, nlog, step, -1, free, S.EV_FREE)

        # Step time (planner.latency); an empty step runs no model.
        dt = step_time_ns(lat_kind, ip, cfgf, P, D, attended, kv_touched) + swap_ns
        clock += dt
        busy += dt
        steps += 1
        if P + D == 0:
            zero_steps += 1
        prefill_tok += P
        decode_tok += D
        preemptions += n_pre
        if free < min_free:
            min_free = free

        # After the step: num_computed_tokens advances (_update_after_schedule);
        # a token is sampled where the chunk reached the known end.
        for j in range(n_sched):
            r = slist[j]
            n = sched_tok[r]
            c0 = ncomp[r]
            known = prompt[r] + nout[r] + ph[r]
            w = min(c0 + n, hw[r]) - c0
            if w > 0:
                if lat_kind == LINEAR:
                    unit = b2 if (n == 1 and c0 == known - 1) else b1
                    waste += (b0 / n_sched) * (w / n) + unit * w
                else:
                    waste += dt * w / (P + D)
            if c0 + n > hw[r]:
                hw[r] = c0 + n
            ncomp[r] = c0 + n
            if L > 0:
                nlog = _log(rlog, nlog, step, r, n, S.EV_SCHED)
            if async_:
                infl[r] += n
                if c0 + n >= known:
                    ph[r] += 1
                    sched_tok[r] = -n  # marks "samples" for the in-flight list
        # update_from_output: sync applies this step's output now; async applies
        # the previous step's (its batch was in flight while this one was planned).
        n_fin = 0
        if async_:
            for j in range(n_pend):
                r = plist[j]
                n = ptok[j]
                samples = n < 0
                if samples:
                    n = -n
                infl[r] -= n
                was_stale = stale[r] > 0
                if was_stale:
                    stale[r] -= n
                    if stale[r] == 0:
                        n_stale -= 1
                if status[r] == S.FINISHED or not samples:
                    continue
                had_ph = ph[r] > 0
                nout[r] += 1
                if not was_stale and ph[r] > 0:
                    ph[r] -= 1
                if first_ns[r] < 0:
                    first_ns[r] = start
                upto = min(ncomp[r] - infl[r], prompt[r] + nout[r])
                if (
                    caching
                    and not was_stale
                    and status[r] == S.RUNNING
                    and had_ph
                    and upto >= (ncached[r] + 1) * bs
                ):
                    # Blocks whose tokens are now all known join the cache.
                    ncached[r] = PC.cache_blocks(
                        r, table, slot_of[r], np.int64(ncached[r]), upto, bs, group, shared_len, R,
                        maxb, hkey, hnext, hprev, tkey, thead, ttail,
                    )  # fmt: skip
                if nout[r] >= max_tokens[r] or prompt[r] + nout[r] >= stop_len:
                    if status[r] == S.WAITING:  # preempted; its stale token ended it
                        wl = _remove_waiting(r, wq, wh, wl)
                    freed, n_free_slots = _finish(
                        r, start, caching, held, status, finish_ns, table, slot_of, slots,
                        n_free_slots, ncached, ref, hkey, fq_next, fq_prev, pc,
                    )  # fmt: skip
                    free += freed
                    n_fin += 1
                    if L > 0:
                        nlog = _log(rlog, nlog, step - 1, r, 0, S.EV_FINISH)
            n_flight = n_pend
            for j in range(n_sched):
                plist[j] = slist[j]
                ptok[j] = sched_tok[slist[j]]
            n_pend = n_sched
        else:
            n_flight = 0
            for j in range(n_sched):
                r = slist[j]
                if ncomp[r] == prompt[r] + nout[r]:
                    nout[r] += 1
                    if first_ns[r] < 0:
                        first_ns[r] = clock
                    if nout[r] >= max_tokens[r] or prompt[r] + nout[r] >= stop_len:
                        freed, n_free_slots = _finish(
                            r, clock, caching, held, status, finish_ns, table, slot_of, slots,
                            n_free_slots, ncached, ref, hkey, fq_next, fq_prev, pc,
                        )  # fmt: skip
                        free += freed
                        n_fin += 1
                        if L > 0:
                            nlog = _log(rlog, nlog, step, r, 0, S.EV_FINISH)
        if n_fin > 0:
            n_run = _drop_finished(run, n_run, status)
            finished += n_fin

        if check:
            used = 0
            for i in range(n_run):
                used += held[run[i]]
            if caching:
                # Shared blocks: count references and distinct blocks in use.
                if pc[PC.FREE_LEN] != free or pc[PC.IN_USE] + free != usable or pc[PC.REFS] != used:
                    inv_err += 1
            elif used + free != usable:
                inv_err += 1

        if steps - 1 < T:
            row = trace[steps - 1]
            row[S.T_START_NS] = start
            row[S.T_END_NS] = clock
            row[S.T_SCHEDULED] = P + D
            row[S.T_PREFILL] = P
            row[S.T_DECODE] = D
            row[S.T_RUNNING] = n_run
            row[S.T_WAITING] = wl
            row[S.T_FREE] = free
            row[S.T_PREEMPTED] = n_pre
            row[S.T_FINISHED] = n_fin
            row[S.T_ADMITTED] = n_adm

        # Frozen: nothing scheduled, nothing preempted, no output in flight,
        # requests waiting. Running is then empty, so the head is refused with
        # the whole pool free and no later event can change that (arrivals
        # queue behind it).
        if (P + D == 0 and n_pre == 0 and n_flight == 0) or cycle:
            livelocked = 1
            livelock_step = steps - 1
            break

    out_i[S.O_FINISHED] = finished
    out_i[S.O_REJECTED] = rejected
    out_i[S.O_RUNNING_END] = n_run
    out_i[S.O_WAITING_END] = wl
    out_i[S.O_ARRIVED] = arrived
    out_i[S.O_PREEMPTIONS] = preemptions
    out_i[S.O_STEPS] = steps
    out_i[S.O_ZERO_STEPS] = zero_steps
    out_i[S.O_MIN_FREE] = min_free
    out_i[S.O_END_NS] = clock
    out_i[S.O_BUSY_NS] = busy
    out_i[S.O_LIVELOCKED] = livelocked
    out_i[S.O_LIVELOCK_STEP] = livelock_step
    out_i[S.O_STEP_LIMIT] = step_limit
    out_i[S.O_PREFILL_TOKENS] = prefill_tok
    out_i[S.O_DECODE_TOKENS] = decode_tok
    out_i[S.O_INVARIANT_ERRORS] = inv_err
    out_i[S.O_MACRO_STEPS] = macro_steps
    out_f[S.F_WASTE_NS] = waste
    return nlog


@njit(parallel=True, cache=True)
def simulate_batch(
    cfg,
    cfgf,
    prompt,
    max_tokens,
    priority,
    group,
    shared_len,
    entry_ns,
    order,
    ncomp,
    nout,
    held,
    status,
    first_ns,
    finish_ns,
    npre,
    hw,
    run,
    wq,
    sched_tok,
    slist,
    out_i,
    out_f,
    trace,
    rlog,
    rlog_n,
    ph,
    infl,
    stale,
    plist,
    ptok,
    use_macro,
    check,
):
    """Run ``simulate_one`` for every row of ``cfg`` (shape (C, NCOLS)), in parallel.

    ``cfgf`` (C, NFLOAT) float64 holds the roofline parameters.
    Workload arrays ``prompt``, ``max_tokens`` have shape (R,), int32, and
    ``priority`` (R,) int64 (lower is served first under the priority policy);
    ``entry_ns`` (C, R) int64 and ``order`` (C, R) int32 are per config because
    the queueing delay depends on alpha. All other arrays are ``state.State``.
    """
    for c in prange(cfg.shape[0]):
        rlog_n[c] = simulate_one(
            cfg[c],
            cfgf[c],
            prompt,
            max_tokens,
            priority,
            group,
            shared_len,
            entry_ns[c],
            order[c],
            ncomp[c],
            nout[c],
            held[c],
            status[c],
            first_ns[c],
            finish_ns[c],
            npre[c],
            hw[c],
            run[c],
            wq[c],
            sched_tok[c],
            slist[c],
            out_i[c],
            out_f[c],
            trace[c],
            rlog[c],
            ph[c],
            infl[c],
            stale[c],
            plist[c],
            ptok[c],
            use_macro,
            check,
        )
