"""Soak, concurrency and determinism on CPU.

- Soak: 2,000 forward+backward iterations of BlockLSTM (peepholes, clip) and of CudnnRNNV3
  (lstm, varied lengths including a 0) after a warm-up; the resident set size must stay within
  RSS_BOUND of its post-warm-up value and must not grow at every sample (a leak's signature).
  `test_soak_detector_catches_a_leak` runs the same loop keeping references on purpose (a large
  and a small leak) and checks that the criterion rejects both: the soak tests can fail.
- Threads: four Python threads run BlockLSTM fwd+bwd, CudnnRNNV3 fwd+bwd, GRUBlockCell and
  LSTMBlockCell (fwd+bwd) at the same time, each on its own inputs: every result is bit for bit
  the result of a sequential run of the same inputs.
- Determinism: the same inputs twice give bitwise-identical outputs and gradients for every
  forward op (CudnnRNN* with dropout = 0). With dropout > 0 and a seed pair the generator
  advances per call (as TF's per-kernel cuDNN dropout state), so two calls differ; what is
  defined is checked: one forward's backward run twice (retain_graph) gives identical grads.
- Thread count: torch.set_num_threads(1) vs the default agree to float32 rounding (not bit for
  bit: the GEMMs split their sums by thread).
- Step loops: the time loops that run in one parallel region with a barrier a step give the
  one-thread bits on two threads, five times over (each fails without the barrier).

Shapes are chosen so that both recurrent-GEMM paths of gemm.h run (oneDNN from 2^22
multiply-adds per step, MKL's packed sgemm below) and, with 2+ threads, the pointwise rows are
split (B > 2048 / H): the BlockLSTM soak takes the MKL path (B = 4, H = 32), the CudnnRNNV3
soak the oneDNN one (B = 16, H = 256, one layer); in the thread test BlockLSTM takes oneDNN
(B = 16, H = 256) and CudnnRNNV3 MKL (B = 6, H = 64).
"""

import ctypes
import gc
import os
import threading

import pytest
import torch

from torch_lstm_grad import raw_ops

F32 = torch.float32

# ---------------------------------------------------------------------------------------------
# Resident memory


_PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 2**20


def _malloc_trim():
    """glibc's malloc_trim, or None (another libc): see _rss."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def _rss() -> int:
    """Resident set size in bytes (/proc/self/statm: size resident shared ... in pages), after
    handing glibc's free pages back to the OS: without the trim, memory freed earlier (by a
    previous test, or the warm-up) stays resident and new allocations, a leak's included, reuse
    it without raising the RSS, so a leak could hide; with it the RSS follows live memory."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


_HAS_STATM = os.path.exists("/proc/self/statm")

# Soak length and sampling.
WARMUP = 200
ITERS = 2000
SAMPLE_EVERY = 200
# The soak loops run on one intra-op thread: with 2 threads, every step's GEMM and row loop
# meets an OpenMP barrier, which on a busy 2-core machine waits for a descheduled thread; the
# soaks then took 10-100x longer (measured: 2.3 s idle, 25 s beside one CPU-bound process,
# minutes beside a parallel test run) with no change in what they check. The same code
# allocates on every thread count; the threaded paths are exercised by the concurrency and
# thread-count tests below.
SOAK_THREADS = 1
# Bound on RSS growth after warm-up. Without a leak the growth is allocator noise: pages that
# glibc cannot hand back (a chunk still in use on a page, fragmentation), Python's object free
# lists and arenas, and buffers first touched late in the run (MKL/OpenMP per-thread scratch,
# a new malloc arena) that count once. Measured on this file's shapes, with the trim of _rss:
# within +-0.05 MiB; without it (another libc) up to ~1.5 MiB. The bound leaves room for other
# allocators and builds. A leak of one iteration's outputs with their autograd graph (BlockLSTM:
# 7 x [8, 4, 32] float32 = 28 KiB plus the saved tensors) adds ~75 MiB over ITERS.
RSS_BOUND = 20 * MiB
# A leak also shows as growth at every sample that does not slow down; noise wobbles, and warm-up
# growth (pages touched as the heap settles: +0.7 MiB over the first ~2,000 iterations of a
# fresh process for BlockLSTM here, then flat for 10,000 more) decelerates. So growth at every
# interval of the second half of the run totalling more than MONOTONE_MIN also fails: that
# catches leaks that raise the RSS by ~2 KiB an iteration, ten times below RSS_BOUND.
MONOTONE_MIN = 2 * MiB


def _rss_report(baseline: int, samples: list[int], what: str) -> str:
    mib = [f"{(s - baseline) / MiB:+.2f}" for s in samples]
    return f"{what}: RSS after warm-up {baseline / MiB:.1f} MiB, growth per sample (MiB) {mib}"


def _check_peak(baseline: int, samples: list[int], what: str) -> None:
    """No sample, the last included, more than RSS_BOUND above the post-warm-up baseline."""
    peak = max(samples) - baseline
    assert peak <= RSS_BOUND, (
        f"{_rss_report(baseline, samples, what)}: peak growth {peak / MiB:.1f} MiB > bound "
        f"{RSS_BOUND / MiB:.0f} MiB"
    )


def _check_trend(baseline: int, samples: list[int], what: str) -> None:
    """No rise over the run's second half, never falling, adding up to more than MONOTONE_MIN
    (a leak's trend). Never falling rather than rising at every sample: a small leak's
    allocations are sometimes served from memory the allocator already had, which leaves one
    interval flat, so a criterion of rising at every sample can miss the planted
    4 KiB-an-iteration leak."""
    half = samples[len(samples) // 2 - 1 :]
    steps = [b - a for a, b in zip(half, half[1:], strict=False)]
    total = half[-1] - half[0]
    assert not (all(d >= 0 for d in steps) and total > MONOTONE_MIN), (
        f"{_rss_report(baseline, samples, what)}: never fell in the second half and grew "
        f"{total / MiB:.1f} MiB (trend bound {MONOTONE_MIN / MiB:.0f} MiB)"
    )


def _check_rss(baseline: int, samples: list[int], what: str) -> None:
    _check_peak(baseline, samples, what)
    _check_trend(baseline, samples, what)


def _u(*shape, scale=1.0, requires_grad=False):
    t = torch.empty(shape, dtype=F32).uniform_(-scale, scale)
    return t.requires_grad_(requires_grad)


# -- workloads: each takes its inputs and returns (outputs..., grads...) ----------------------


def _block_lstm_inputs(T=8, B=4, I=16, H=32):  # noqa: E741
    x, cs, h = _u(T, B, I), _u(B, H, scale=2.0), _u(B, H)
    w, wci, wcf, wco, b = _u(I + H, 4 * H, scale=0.3), _u(H), _u(H), _u(H), _u(4 * H, scale=0.3)
    leaves = [t.requires_grad_() for t in (x, cs, h, w, wci, wcf, wco, b)]
    # Upstream grads for cs and h (fixed, so backward does real work on both).
    return leaves, (_u(T, B, H), _u(T, B, H))


def _block_lstm_step(inputs, v2=False):
    leaves, (g_cs, g_h) = inputs
    T = leaves[0].shape[0]
    if v2:
        out = raw_ops.BlockLSTMV2(T, *leaves, cell_clip=0.5, use_peephole=True)
    else:
        out = raw_ops.BlockLSTM(T - 1, *leaves, forget_bias=0.7, cell_clip=0.5, use_peephole=True)
    grads = torch.autograd.grad((out.cs, out.h), leaves, (g_cs, g_h))
    return (*out, *grads)


def _cudnn_inputs(T=8, B=4, I=16, H=32, L=2, D=1, mode="lstm", lengths=(8, 0, 5, 3), num_proj=0):  # noqa: E741
    direction = "bidirectional" if D == 2 else "unidirectional"
    attrs = dict(rnn_mode=mode, num_proj=num_proj, direction=direction)
    size = raw_ops.CudnnRNNParamsSize(L, H, I, T=F32, S=torch.int32, **attrs)
    n = int(size[0])
    P = num_proj or H
    x, params = _u(T, B, I), _u(n, scale=0.3)
    h0 = _u(L * D, B, P)
    c0 = _u(L * D, B, H, scale=2.0) if mode == "lstm" else torch.zeros(())
    for t in (x, h0, params, *((c0,) if mode == "lstm" else ())):
        t.requires_grad_()
    lens = None if lengths is None else torch.tensor(lengths, dtype=torch.int32)
    ups = (_u(T, B, D * P), _u(L * D, B, P), _u(L * D, B, H) if mode == "lstm" else None)
    return (x, h0, c0, params, lens, attrs), ups


def _cudnn_step(inputs, op="V3", **extra):
    (x, h0, c0, params, lens, attrs), (gy, gh, gc) = inputs
    if op == "V3":
        out = raw_ops.CudnnRNNV3(x, h0, c0, params, lens, **attrs, **extra)
    else:  # CudnnRNN / CudnnRNNV2: every row runs T steps, no projection
        fn = raw_ops.CudnnRNN if op == "V1" else raw_ops.CudnnRNNV2
        out = fn(x, h0, c0, params, **{k: v for k, v in attrs.items() if k != "num_proj"}, **extra)
    lstm = attrs["rnn_mode"] == "lstm"
    leaves = (x, h0, c0, params) if lstm else (x, h0, params)
    outs = (out.output, out.output_h, out.output_c) if lstm else (out.output, out.output_h)
    grads = torch.autograd.grad(outs, leaves, (gy, gh, gc)[: len(outs)])
    return (*out, *grads)


def _lstm_cell_inputs(B=4, I=16, H=32):  # noqa: E741
    x, cs, h = _u(B, I), _u(B, H, scale=2.0), _u(B, H)
    w, wci, wcf, wco, b = _u(I + H, 4 * H, scale=0.3), _u(H), _u(H), _u(H), _u(4 * H, scale=0.3)
    leaves = [t.requires_grad_() for t in (x, cs, h, w, wci, wcf, wco, b)]
    return leaves, (_u(B, H), _u(B, H))


def _lstm_cell_step(inputs):
    leaves, (g_cs, g_h) = inputs
    out = raw_ops.LSTMBlockCell(*leaves, forget_bias=0.7, cell_clip=0.5, use_peephole=True)
    grads = torch.autograd.grad((out.cs, out.h), leaves, (g_cs, g_h))
    return (*out, *grads)


def _gru_cell_inputs(B=4, I=16, H=32):  # noqa: E741
    x, h = _u(B, I), _u(B, H)
    w_ru, w_c = _u(I + H, 2 * H, scale=0.3), _u(I + H, H, scale=0.3)
    b_ru, b_c = _u(2 * H, scale=0.3), _u(H, scale=0.3)
    leaves = [t.requires_grad_() for t in (x, h, w_ru, w_c, b_ru, b_c)]
    return leaves, _u(B, H)


def _gru_cell_step(inputs):
    leaves, g_h = inputs
    out = raw_ops.GRUBlockCell(*leaves)
    return (*out, *torch.autograd.grad(out.h, leaves, g_h))


# ---------------------------------------------------------------------------------------------
# Soak


def _block_lstm_soak_step(keep):
    leaves, (g_cs, g_h) = _block_lstm_inputs()

    def step():
        out = raw_ops.BlockLSTM(8, *leaves, cell_clip=0.5, use_peephole=True)
        torch.autograd.backward((out.cs, out.h), (g_cs, g_h))  # .grad accumulates in place
        if keep is not None:
            keep(out)

    return step


def _cudnn_soak_step(keep):
    (x, h0, c0, params, lens, attrs), (gy, gh, gc) = _cudnn_inputs(
        B=16, H=256, L=1, lengths=(8, 0, 5, 3, 8, 1, 6, 2) * 2
    )
    assert 0 in lens.tolist() and len(set(lens.tolist())) > 2  # varied lengths, one empty row

    def step():
        out = raw_ops.CudnnRNNV3(x, h0, c0, params, lens, **attrs)
        torch.autograd.backward((out.output, out.output_h, out.output_c), (gy, gh, gc))
        if keep is not None:
            keep(out)

    return step


SOAKS = {"BlockLSTM": _block_lstm_soak_step, "CudnnRNNV3": _cudnn_soak_step}


def _soak(make_step, keep=None) -> tuple[int, list[int]]:
    """WARMUP iterations, then ITERS more with the RSS sampled every SAMPLE_EVERY. The cyclic
    garbage collector is off during the loop: the ops must free everything by reference
    counting, so a reference cycle per call would show up as growth, not be hidden by gc."""
    step = make_step(keep)
    threads = torch.get_num_threads()
    torch.set_num_threads(SOAK_THREADS)
    try:
        for _ in range(WARMUP):
            step()
        gc.collect()
        baseline, samples = _rss(), []
        gc.disable()
        try:
            for it in range(1, ITERS + 1):
                step()
                if it % SAMPLE_EVERY == 0:
                    samples.append(_rss())
        finally:
            gc.enable()
    finally:
        torch.set_num_threads(threads)
    return baseline, samples


@pytest.mark.skipif(not _HAS_STATM, reason="needs /proc/self/statm (Linux)")
@pytest.mark.parametrize("op", list(SOAKS))
def test_soak_rss_is_flat(op):
    baseline, samples = _soak(SOAKS[op])
    assert len(samples) == ITERS // SAMPLE_EVERY
    growth = [round((s - baseline) / MiB, 2) for s in samples]
    print(f"\n{op}: RSS after warm-up {baseline / MiB:.1f} MiB, growth (MiB) {growth}", end="")
    _check_rss(baseline, samples, op)


# Deliberate leaks, to show that the criterion fails a leaking loop. "outputs_and_graph" keeps
# every iteration's outputs (so their autograd graph): ~38 KiB per iteration, ~75 MiB in all,
# over RSS_BOUND. "cs_and_h" keeps the storage of cs and h (8 KiB per iteration plus two tensor
# objects): the trend rule's case. How much of a leak shows in the RSS depends on the process's
# history: the kept blocks first fill holes that earlier frees left on resident pages. Measured:
# +23.7 MiB over the run in a fresh process (over RSS_BOUND as well); in a fresh-clone CI run
# (the whole suite before this test) keeping h alone, 4 KiB an iteration, grew the RSS by
# 2.2 MiB, 1.6 MiB of it in the second half: under MONOTONE_MIN, too small a leak to show that
# the rule works; twice that leak is not.
LEAKS = {
    "outputs_and_graph": (lambda kept: kept.append, _check_peak),
    "cs_and_h": (
        lambda kept: lambda out: kept.append((out.cs.detach(), out.h.detach())),
        _check_trend,
    ),
}


@pytest.mark.skipif(not _HAS_STATM, reason="needs /proc/self/statm (Linux)")
@pytest.mark.parametrize("leak", list(LEAKS))
def test_soak_detector_catches_a_leak(leak):
    """test_soak_rss_is_flat's loop, with references kept on purpose: the soak criterion, and
    the rule meant for this size of leak, must reject the run (so the soak tests can fail)."""
    kept: list = []
    make_keep, rule = LEAKS[leak]
    baseline, samples = _soak(SOAKS["BlockLSTM"], make_keep(kept))
    assert len(kept) == WARMUP + ITERS
    growth = [round((s - baseline) / MiB, 1) for s in samples]
    print(f"\n{leak}: growth (MiB) {growth}", end="")
    kept.clear()
    with pytest.raises(AssertionError, match="MiB"):
        _check_rss(baseline, samples, f"BlockLSTM keeping {leak}")
    with pytest.raises(AssertionError, match="MiB"):
        rule(baseline, samples, f"BlockLSTM keeping {leak}")


def test_soak_criterion_on_synthetic_series():
    """The criterion without the noise of a real run: noise and decelerating warm-up growth pass;
    a steady 1 MiB per sample (10 MiB, under RSS_BOUND) fails the trend rule; a jump over the
    bound fails."""
    base = 300 * MiB
    noise = [base + d * MiB for d in (0.7, 0.4, 0.2, 0.2, 0.2, 0.5, 0.5, 0.1, 0.2, 0.2)]
    _check_rss(base, noise, "noise")
    settling = [base + 3 * MiB * (1 - 0.6**k) for k in range(1, 11)]  # +3 MiB, at every sample
    _check_rss(base, settling, "settling warm-up")
    _check_rss(base, [base + 15 * MiB] * 10, "one-off step under the bound")
    steady = [base + k * MiB for k in range(1, 11)]
    _check_peak(base, steady, "steady")
    with pytest.raises(AssertionError, match="never fell in the second half"):
        _check_trend(base, steady, "steady")
    with pytest.raises(AssertionError, match="peak growth"):
        _check_peak(base, [*noise[:9], base + 21 * MiB], "jump")


# ---------------------------------------------------------------------------------------------
# Concurrency


THREAD_ITERS = 150  # per thread
N_INPUTS = 4  # distinct input sets per workload, cycled


def _workloads():
    """name -> (step, [inputs...]); larger shapes so the kernels' parallel paths run too."""
    return {
        "BlockLSTM": (_block_lstm_step, [_block_lstm_inputs(B=16, H=256) for _ in range(N_INPUTS)]),
        "CudnnRNNV3": (
            _cudnn_step,
            [_cudnn_inputs(B=6, H=64, lengths=(8, 0, 5, 3, 8, 1)) for _ in range(N_INPUTS)],
        ),
        "GRUBlockCell": (_gru_cell_step, [_gru_cell_inputs(B=40, H=64) for _ in range(N_INPUTS)]),
        "LSTMBlockCell": (
            _lstm_cell_step,
            [_lstm_cell_inputs(B=40, H=64) for _ in range(N_INPUTS)],
        ),
    }


def _assert_same(got, want, what):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, (what, k)
        assert torch.equal(g, w), (
            f"{what}: result {k} differs (max |diff| "
            f"{(g.double() - w.double()).abs().max().item():.3g})"
        )


def test_concurrent_threads_equal_sequential():
    work = _workloads()
    want = {name: [step(inp) for inp in inputs] for name, (step, inputs) in work.items()}
    barrier = threading.Barrier(len(work))
    errors: list[str] = []
    done: dict[str, int] = {}

    def run(name):
        step, inputs = work[name]
        try:
            barrier.wait(timeout=60)
            for it in range(THREAD_ITERS):
                k = it % N_INPUTS
                _assert_same(step(inputs[k]), want[name][k], f"{name} iteration {it}")
            done[name] = THREAD_ITERS
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(f"{name}: {type(err).__name__}: {err}")
            barrier.abort()

    threads = [threading.Thread(target=run, args=(name,), name=name) for name in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread did not finish"
    assert not errors, errors
    assert done == dict.fromkeys(work, THREAD_ITERS)


# ---------------------------------------------------------------------------------------------
# Determinism: same inputs, same bits


DETERMINISTIC = {
    "BlockLSTM": lambda: (_block_lstm_step, _block_lstm_inputs(B=40, H=64)),
    "BlockLSTMV2": lambda: (lambda i: _block_lstm_step(i, v2=True), _block_lstm_inputs(B=40, H=64)),
    "LSTMBlockCell": lambda: (_lstm_cell_step, _lstm_cell_inputs(B=40, H=64)),
    "GRUBlockCell": lambda: (_gru_cell_step, _gru_cell_inputs(B=40, H=64)),
    "CudnnRNN": lambda: (lambda i: _cudnn_step(i, op="V1"), _cudnn_inputs(H=64, lengths=None)),
    "CudnnRNNV2": lambda: (lambda i: _cudnn_step(i, op="V2"), _cudnn_inputs(H=64, lengths=None)),
    "CudnnRNNV3-lstm": lambda: (_cudnn_step, _cudnn_inputs(B=6, H=64, lengths=(8, 0, 5, 3, 8, 1))),
    "CudnnRNNV3-lstm-proj-bidi": lambda: (_cudnn_step, _cudnn_inputs(H=64, D=2, num_proj=24)),
    "CudnnRNNV3-gru-bidi": lambda: (_cudnn_step, _cudnn_inputs(H=64, D=2, mode="gru")),
    "CudnnRNNV3-rnn_tanh": lambda: (_cudnn_step, _cudnn_inputs(H=64, mode="rnn_tanh")),
    "CudnnRNNV3-rnn_relu": lambda: (_cudnn_step, _cudnn_inputs(H=64, mode="rnn_relu")),
}


@pytest.mark.parametrize("case", list(DETERMINISTIC))
def test_same_inputs_give_identical_bits(case):
    step, inputs = DETERMINISTIC[case]()
    first = step(inputs)
    _assert_same(step(inputs), first, case)
    _assert_same(step(inputs), first, case)


def _dropout_inputs():
    return _cudnn_inputs(L=3, H=64, lengths=(8, 0, 5, 3))


def test_seeded_dropout_differs_per_call_but_its_backward_is_deterministic():
    (x, h0, c0, params, lens, attrs), (gy, gh, gc) = _dropout_inputs()
    leaves = (x, h0, c0, params)
    a = raw_ops.CudnnRNNV3(x, h0, c0, params, lens, dropout=0.5, seed=17, seed2=29, **attrs)
    b = raw_ops.CudnnRNNV3(x, h0, c0, params, lens, dropout=0.5, seed=17, seed2=29, **attrs)
    # TF semantics: the seed pair's generator advances per call, so the masks differ.
    assert not torch.equal(a.output, b.output)
    # Determinism where it is defined: the same forward's backward, twice.
    outs, ups = (a.output, a.output_h, a.output_c), (gy, gh, gc)
    g1 = torch.autograd.grad(outs, leaves, ups, retain_graph=True)
    g2 = torch.autograd.grad(outs, leaves, ups, retain_graph=True)
    g3 = torch.autograd.grad(outs, leaves, ups)
    _assert_same(g2, g1, "dropout backward, second run")
    _assert_same(g3, g1, "dropout backward, third run")
    # ... and its Backprop raw op on the saved reserve_space, twice, equals autograd.
    saved = (a.output, a.output_h, a.output_c, gy, gh, gc, a.reserve_space, a.host_reserved)
    drop = dict(dropout=0.5, seed=17, seed2=29, **attrs)
    bp = [raw_ops.CudnnRNNBackpropV3(x, h0, c0, params, lens, *saved, **drop) for _ in range(2)]
    _assert_same(bp[1], bp[0], "CudnnRNNBackpropV3 twice")
    _assert_same(bp[0], g1, "CudnnRNNBackpropV3 vs autograd")


def test_unseeded_dropout_is_reproducible_under_manual_seed():
    """seed = seed2 = 0 draws from torch's default generator: determinism is defined there."""
    inputs = _dropout_inputs()
    runs = []
    for _ in range(2):
        torch.manual_seed(1234)
        runs.append(_cudnn_step(inputs, dropout=0.5))
    _assert_same(runs[1], runs[0], "unseeded dropout under torch.manual_seed")


# ---------------------------------------------------------------------------------------------
# Thread count: 1 vs the default (2 at least, so the check is not vacuous on a 1-core machine)

# assert_close(rtol=atol=THREADS_TOL). Measured: every case bit for bit equal except
# CudnnRNNV3 with varied lengths (steps with fewer live rows than B leave the packed GEMM for
# ATen's, whose blocking follows the thread count): up to 7.2e-7 absolute, 0.38 of the allowance
# at worst over 10 seeds.
THREADS_TOL = 1e-6


@pytest.mark.parametrize("case", list(DETERMINISTIC))
def test_one_thread_vs_default_close(case):
    step, inputs = DETERMINISTIC[case]()
    default = torch.get_num_threads()
    many = max(default, 2)
    try:
        torch.set_num_threads(many)
        got_many = step(inputs)
        torch.set_num_threads(1)
        got_one = step(inputs)
    finally:
        torch.set_num_threads(default)
    assert torch.get_num_threads() == default
    assert len(got_one) == len(got_many)
    for k, (a, b) in enumerate(zip(got_one, got_many, strict=True)):
        msg = lambda m, k=k: f"{case} result {k}: {m}"  # noqa: E731
        torch.testing.assert_close(a, b, rtol=THREADS_TOL, atol=THREADS_TOL, msg=msg)


# ---------------------------------------------------------------------------------------------
# Time loops in one parallel region (cpu::for_steps_column_blocks: the threads keep their units
# from step to step and meet at a barrier after each): split over two threads they give the
# one-thread results bit for bit (a unit's sums are one thread's whatever the split), every
# time. A missing or misplaced barrier would let a thread read an h (forward) or dgates
# (backward) row that another is still writing, or copy a finished row's state early.
# Shapes where every step splits over the threads (B·H·4H >= 2^18 multiply-adds): BlockLSTM on
# the panels (B <= 64) and on brgemm's blocks (B > 64), CudnnRNNV3's LSTM with lengths that
# finish rows at several steps (one empty), and the inference forward of the fused cell.


def _fused_cell_inference_inputs(T=10, B=4, I=16, H=128):  # noqa: E741
    from torch_lstm_grad.modules import LSTMBlockFusedCell

    cell = LSTMBlockFusedCell(H, I, use_peephole=True, cell_clip=0.5)
    with torch.no_grad():
        for p in cell.parameters():
            p.uniform_(-0.3, 0.3)
    return cell, (_u(T, B, I), (_u(B, H, scale=2.0), _u(B, H)))


def _fused_cell_inference_step(inputs):
    cell, (x, state) = inputs
    with torch.inference_mode():
        out, (cs, h) = cell(x, state, sequence_length=None)
    return out, cs, h


STEP_LOOPS = {
    "BlockLSTM-panels": lambda: (_block_lstm_step, _block_lstm_inputs(T=12, B=8, H=128)),
    "BlockLSTM-blocks": lambda: (_block_lstm_step, _block_lstm_inputs(T=6, B=80, H=64)),
    "CudnnRNNV3-lstm-lengths": lambda: (
        _cudnn_step,
        _cudnn_inputs(T=8, B=8, H=128, L=1, lengths=(8, 0, 5, 3, 8, 1, 6, 2)),
    ),
    "LSTMBlockFusedCell-inference": lambda: (
        _fused_cell_inference_step,
        _fused_cell_inference_inputs(),
    ),
}


@pytest.mark.parametrize("case", list(STEP_LOOPS))
def test_step_loops_split_over_threads_give_the_one_thread_bits(case):
    if case.startswith("CudnnRNNV3") and torch.backends.cpu.get_cpu_capability() != "AVX512":
        # Without the AVX-512 panels, steps with fewer live rows than B take ATen's GEMM,
        # whose blocking follows the thread count (THREADS_TOL above).
        pytest.skip("CudnnRNN's fused loop runs on AVX-512 CPUs")
    step, inputs = STEP_LOOPS[case]()
    default = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        want = step(inputs)
        torch.set_num_threads(max(default, 2))
        for _ in range(5):
            _assert_same(step(inputs), want, f"{case}: {torch.get_num_threads()} threads vs 1")
    finally:
        torch.set_num_threads(default)
