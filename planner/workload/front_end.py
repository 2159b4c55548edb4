"""vLLM 0.33's OpenAI front end: which requests it refuses before the
scheduler sees them, and which it admits with fewer output tokens than asked.
One definition, used by the kernel (``kernel/step.py`` ``_arrivals``,
``kernel/fleet.py``), the reference engine and ``Workload.rejected``/``cut``
(on arrays, through ``front_end_rejects.py_func``)."""

from __future__ import annotations

from numba import njit

# The two front-end rules in words (``front_end_rejects``, ``Workload.cut``).
REJECT_RULE = "prompt >= max_model_len or output > max_model_len"
CUT_RULE = "prompt + output > max_model_len"


@njit(cache=True, inline="always")
def front_end_rejects(prompt: int, max_tokens: int, max_model_len: int) -> bool:
    """Whether vLLM 0.33's OpenAI front end answers a request with HTTP 400.

    Two rules, read in the 0.33.0 wheel: a prompt of ``max_model_len``
    tokens or more (``renderers/params.py``, ``TokenizeParams._token_len_check``
    refuses a longer one; at exactly ``max_model_len``,
    ``entrypoints/serve/utils/api_utils.py`` ``get_max_tokens`` leaves 0
    output tokens, which ``SamplingParams`` refuses), and ``max_tokens`` above
    ``max_model_len`` (``TokenizeParams.__post_init__``). A request within
    both whose prompt + max_tokens exceeds ``max_model_len`` is *not* refused:
    ``get_max_tokens`` clamps its max_tokens to ``max_model_len - prompt``
    (``capacity.stop_length`` ends it there; ``Workload.cut`` counts it). The
    workload's output length stands for max_tokens (``vllm bench serve``
    sends it with ``ignore_eos``).
    """
    # ``|``, not ``or``: ``Workload.rejected`` calls it on arrays (``py_func``).
    return (prompt >= max_model_len) | (max_tokens > max_model_len)
