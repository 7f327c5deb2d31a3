"""Expert parallelism (moejit/distributed.py) on the CPU, no GPU needed:

(a) the row-order and count bookkeeping (route_plan, place_routes, combine_routes) for W = 2,
    3, 4 ranks simulated in one process, against a brute-force per-route model of what every
    rank sends and receives and of the per-token combine: split sizes, send order, received
    order, local expert ids, the inverse permutation, dropped routes; edge cases: every route to
    one expert (that rank receives W*T*k rows), a rank that receives nothing, T = 0 on a rank,
    duplicate routes.
(b) the real layer on W = 2 and 3 processes (torch.multiprocessing, fork, torch.distributed
    gloo on CPU tensors), float64, local experts = a float64 reference: the output and every
    gradient (x, routing weights, each rank's local weights) against one float64 process
    running the whole layer (moejit_bench.peers.eager_loop_layer) on the same global batch; bitwise
    reproducibility; ranks that disagree on the layer shape get InvalidArgumentError on every
    rank; the torch._grouped_mm baseline's local experts (float32, torch._grouped_mm runs on
    the CPU); and the default local experts (moejit's op, top_k = 1) with the op's launches
    emulated as in test_torch_op_emulated.py, in bf16.

Inputs are fresh random draws (the seed is in every failure message).
"""

import os
import random
import socket
import sys
from datetime import timedelta

import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as tmp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import moejit  # noqa: E402
import moejit.distributed as ep  # noqa: E402
from moejit_bench.peers import eager_loop_layer  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

F64 = torch.float64


def fresh_seed() -> int:
    return random.SystemRandom().randrange(1 << 31)


# ------------------------------------------------------------------ (a) bookkeeping


def brute_force(sels, world, e_local):
    """Per rank r: send[r][d] = [(local expert, t, j), ...] in the documented order, and
    recv[r] = [(source, local expert, t, j), ...]: every route by explicit loops."""
    send = []
    for sel in sels:
        tokens, k = sel.shape
        per_dest = [[] for _ in range(world)]
        for e in range(world * e_local):       # by (dest, local expert) ...
            for t in range(tokens):             # ... token ...
                for j in range(k):              # ... slot
                    if int(sel[t, j]) == e:
                        per_dest[e // e_local].append((e % e_local, t, j))
        send.append(per_dest)
    recv = [[(s,) + route for s in range(world) for route in send[s][r]] for r in range(world)]
    return send, recv


def simulate(sels, world, e_local):
    """The real bookkeeping on each simulated rank, and the exchange by hand."""
    plans = [ep.route_plan(sel, world, e_local) for sel in sels]
    chunks, locals_ = [], []
    for sel, plan in zip(sels, plans):
        splits = plan.send_counts.tolist()
        n = sum(splits)
        chunks.append(list(plan.order[:n].split(splits)))
        locals_.append(list(plan.local_ids[:n].split(splits)))
    return plans, chunks, locals_


def check_bookkeeping(sels, world, e_local, seed):
    msg = f"(seed {seed}, W={world}, E_local={e_local})"
    send, recv = brute_force(sels, world, e_local)
    plans, chunks, locals_ = simulate(sels, world, e_local)
    for s, (sel, plan) in enumerate(zip(sels, plans)):
        tokens, k = sel.shape
        # order is a permutation of the T*k route ids; dropped routes come after the sent ones
        assert torch.equal(plan.order.sort().values, torch.arange(tokens * k)), msg
        assert plan.send_counts.tolist() == [len(d) for d in send[s]], msg
        n = int(plan.send_counts.sum())
        dropped = plan.order[n:]
        flat = sel.reshape(-1)
        assert bool(((flat[dropped] < 0) | (flat[dropped] >= world * e_local)).all()), msg
        assert bool((plan.local_ids[n:] == -1).all()), msg
        for d in range(world):
            routes = chunks[s][d]
            got = [(int(le), int(r) // k, int(r) % k) for le, r in zip(locals_[s][d], routes)]
            assert got == send[s][d], f"rank {s} -> {d} send order {msg}"
    # what each rank receives: the concatenation over sources, R from the received counts
    for r in range(world):
        got = [(s, int(le), int(route) // sels[s].shape[1], int(route) % sels[s].shape[1])
               for s in range(world) for le, route in zip(locals_[s][r], chunks[s][r])]
        assert got == recv[r], f"rank {r} receives {msg}"
        recv_counts = [int(plans[s].send_counts[r]) for s in range(world)]
        assert sum(recv_counts) == len(recv[r]), msg
    # the way back: integer-valued rows (exact in float64 whatever the order of the sum),
    # placed by route and summed per token, against the per-slot loop
    g = torch.Generator().manual_seed(seed)
    for s, (sel, plan) in enumerate(zip(sels, plans)):
        tokens, k = sel.shape
        n = int(plan.send_counts.sum())
        routes = plan.order[:n]
        rows = torch.randint(-1000, 1000, (n, 5), generator=g).to(F64)
        placed = ep.place_routes(rows, routes, tokens, k)
        combined = ep.combine_routes(rows, routes, tokens, k)
        expected = torch.zeros(tokens, 5, dtype=F64)
        by_route = {int(route): rows[i] for i, route in enumerate(routes)}
        for t in range(tokens):
            for j in range(k):
                row = by_route.get(t * k + j)
                if row is None:  # dropped
                    assert not placed[t, j].any(), msg
                    continue
                assert torch.equal(placed[t, j], row), msg      # the inverse permutation
                expected[t] += row
        assert torch.equal(combined, expected), f"rank {s} combine {msg}"
    return plans


def random_sel(g, tokens, k, experts, low=None, high=None):
    low = 0 if low is None else low
    high = experts if high is None else high
    return torch.randint(low, high, (tokens, k), generator=g)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_bookkeeping_random_with_duplicates_and_drops(world):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    e_local, k = 3, 4
    experts = world * e_local
    # ids drawn with replacement from [-2, E+2): duplicates within a token and dropped routes
    sels = [random_sel(g, int(torch.randint(1, 12, (1,), generator=g)), k, experts, -2,
                       experts + 2) for _ in range(world)]
    check_bookkeeping(sels, world, e_local, seed)
    for dtype in (torch.int32, torch.int64):  # both index dtypes plan the same
        plans = [ep.route_plan(s.to(dtype), world, e_local) for s in sels]
        ref = [ep.route_plan(s, world, e_local) for s in sels]
        for a, b in zip(plans, ref):
            assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_bookkeeping_everything_to_one_expert(world):
    seed = fresh_seed()
    tokens, k, e_local = 7, 3, 2
    target = world * e_local - 1              # the last rank's last expert
    sels = [torch.full((tokens, k), target) for _ in range(world)]
    plans = check_bookkeeping(sels, world, e_local, seed)
    received = sum(int(p.send_counts[world - 1]) for p in plans)
    assert received == world * tokens * k      # 2*T*k for two ranks that each send all
    for p in plans:
        assert p.send_counts[:world - 1].sum() == 0


@pytest.mark.parametrize("world", [2, 3, 4])
def test_bookkeeping_rank_receiving_nothing_and_empty_rank(world):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    e_local, k = 2, 2
    # nobody routes to rank 0's experts; rank 1 has no tokens at all
    sels = [random_sel(g, 0 if r == 1 else 9, k, world * e_local, e_local)
            for r in range(world)]
    plans = check_bookkeeping(sels, world, e_local, seed)
    assert sum(int(p.send_counts[0]) for p in plans) == 0
    assert plans[1].order.numel() == 0 and plans[1].send_counts.sum() == 0


@pytest.mark.parametrize("world", [2, 3])
def test_bookkeeping_duplicate_routes_keep_slot_order(world):
    seed = fresh_seed()
    e_local = 2
    sels = [torch.tensor([[1, 1, 1], [1, 0, 1]]) for _ in range(world)]
    check_bookkeeping(sels, world, e_local, seed)
    plan = ep.route_plan(sels[0], world, e_local)
    # expert 0: route (1,1); expert 1: (0,0) (0,1) (0,2) (1,0) (1,2), in (token, slot) order
    assert plan.order.tolist() == [4, 0, 1, 2, 3, 5]
    assert plan.local_ids.tolist() == [0, 1, 1, 1, 1, 1]


@pytest.mark.parametrize("case", ["random", "one expert", "no rows", "every expert empty but one"])
def test_group_rows_matches_a_brute_force_grouping(case):
    """ep.group_rows (the default local experts' grouping of received rows by local expert):
    the order is the stable sort by expert id and the offsets bound each expert's rows."""
    g = torch.Generator().manual_seed(fresh_seed())
    e_local = 5
    rows = {"random": 97, "one expert": 40, "no rows": 0, "every expert empty but one": 13}[case]
    if case == "random":
        ids = torch.randint(0, e_local, (rows,), generator=g)
    else:
        ids = torch.full((rows,), 3)
    order, offsets = ep.group_rows(ids.to(torch.int32), e_local)
    want_order = [r for e in range(e_local) for r in range(rows) if int(ids[r]) == e]
    assert order.tolist() == want_order
    assert offsets.dtype == torch.int32 and offsets.tolist() == \
        [sum(1 for r in range(rows) if int(ids[r]) < e) for e in range(e_local + 1)]


def test_combine_is_a_fixed_order_sum():
    """combine_routes twice on the same rows is bitwise equal (no atomics), and equals a
    float64 per-slot sum to rounding."""
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    tokens, k = 33, 8
    routes = torch.randperm(tokens * k, generator=g)[: tokens * k - 5]
    rows = torch.randn(routes.numel(), 64, generator=g, dtype=torch.float32)
    a = ep.combine_routes(rows, routes, tokens, k)
    b = ep.combine_routes(rows.clone(), routes.clone(), tokens, k)
    assert torch.equal(a, b)
    ref = ep.place_routes(rows.double(), routes, tokens, k).sum(1)
    assert torch.allclose(a.double(), ref, rtol=1e-5, atol=1e-5), f"seed {seed}"


# ------------------------------------------------------------------ (b) real processes

H, I, K = 16, 8, 3


def reference_local_experts(x_rows, local_ids, row_weights, w_gate_up, w_down,
                            swiglu_limit=None):
    """Float64 local experts, per row (weights gathered per row, einsum); independent of the
    per-expert loop that the global reference uses."""
    ids = local_ids.long()
    inter = w_down.shape[2]
    gu = torch.einsum("rh,rih->ri", x_rows, w_gate_up[ids])
    g, u = gu[:, :inter], gu[:, inter:]
    if swiglu_limit:
        g, u = g.clamp(max=swiglu_limit), u.clamp(-swiglu_limit, swiglu_limit)
    a = F.silu(g) * u * row_weights.unsqueeze(1).to(g.dtype)
    return torch.einsum("ri,rhi->rh", a, w_down[ids])


def make_case(name, world, e_local, seed):
    """The global batch (every rank draws the same): per-rank token counts, routing, x, dout,
    all weights."""
    g = torch.Generator().manual_seed(seed)
    experts = world * e_local
    tokens = [int(torch.randint(3, 14, (1,), generator=g)) for _ in range(world)]
    limit = None
    if name == "T=0 on a rank":
        tokens[world - 1] = 0
    total = sum(tokens)
    if name in ("softmax top-k", "3-D x", "determinism"):
        logits = torch.randn(total, experts, generator=g, dtype=F64)
        rw, sel = torch.softmax(logits, -1).topk(K, -1)
        rw = rw / rw.sum(-1, keepdim=True)
        limit = 0.9 if name == "softmax top-k" else None
    else:
        if name == "duplicates and drops":
            sel = torch.randint(-1, experts + 1, (total, K), generator=g)
        elif name == "all to one expert":
            sel = torch.full((total, K), experts - 1)
        elif name == "a rank receives nothing":
            sel = torch.randint(e_local, experts, (total, K), generator=g)
        else:  # T=0 on a rank
            sel = torch.randint(0, experts, (total, K), generator=g)
        rw = torch.rand(total, K, generator=g, dtype=F64) + 0.1
    x = torch.randn(total, H, generator=g, dtype=F64)
    dout = torch.randn(total, H, generator=g, dtype=F64)
    w_gate_up = torch.randn(experts, 2 * I, H, generator=g, dtype=F64) * H ** -0.5
    w_down = torch.randn(experts, H, I, generator=g, dtype=F64) * I ** -0.5
    return tokens, sel, rw, x, dout, w_gate_up, w_down, limit


def global_reference(sel, rw, x, dout, w_gate_up, w_down, limit):
    leaves = [t.clone().requires_grad_() for t in (x, rw, w_gate_up, w_down)]
    out = eager_loop_layer(leaves[0], sel, leaves[1], w_gate_up=leaves[2], w_down=leaves[3],
                           swiglu_limit=limit)
    out.backward(dout)
    return out.detach(), [t.grad for t in leaves]


def rel(a, b):
    den = b.norm().item()
    diff = (a - b).norm().item()
    return diff / den if den > 0 else diff


def run_rank(rank, world, case, e_local, seed, local_experts, dtype=F64, rw_dtype=None):
    tokens, sel, rw, x, dout, w_gate_up, w_down, limit = case
    start = sum(tokens[:rank])
    mine = slice(start, start + tokens[rank])
    experts = slice(rank * e_local, (rank + 1) * e_local)
    leaves = [x[mine].to(dtype), rw[mine].to(rw_dtype or dtype), w_gate_up[experts].to(dtype),
              w_down[experts].to(dtype)]
    leaves = [t.clone().requires_grad_() for t in leaves]
    out = ep.expert_parallel_moe(leaves[0], sel[mine], leaves[1], leaves[2], leaves[3], limit,
                                 local_experts=local_experts)
    out.backward(dout[mine].to(dtype))
    return out.detach(), [t.grad for t in leaves], (mine, experts)


def check_against_reference(rank, world, name, case, e_local, seed, tol, **kw):
    dtype, rw_dtype = kw.get("dtype", F64), kw.get("rw_dtype") or kw.get("dtype", F64)
    tokens, sel, rw, x, dout, w_gate_up, w_down, limit = case
    # the reference sees the inputs rounded as the layer sees them
    case = (tokens, sel, rw.to(rw_dtype).double(), *(t.to(dtype).double() for t in (
        x, dout, w_gate_up, w_down)), limit)
    out, grads, (mine, experts) = run_rank(rank, world, case, e_local, seed, **kw)
    ref_out, ref_grads = global_reference(*case[1:])
    expected = [ref_out[mine], ref_grads[0][mine], ref_grads[1][mine], ref_grads[2][experts],
                ref_grads[3][experts]]
    names = ["out", "dx", "d_routing_weights", "dw_gate_up", "dw_down"]
    for n, got, want in zip(names, [out] + grads, expected):
        assert got is not None, f"{name}: rank {rank} got no {n}"
        assert got.shape == want.shape, f"{name}: rank {rank} {n} shape {got.shape}"
        err = rel(got.double(), want)
        assert err <= tol, (f"{name}: rank {rank}/{world} {n} rel err {err:.3g} > {tol} "
                            f"(seed {seed})")
    return out, grads


CASES = ("softmax top-k", "duplicates and drops", "all to one expert",
         "a rank receives nothing", "T=0 on a rank")


def worker(rank, world, port, seed, emulate):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    try:
        e_local = 2
        for i, name in enumerate(CASES):
            case = make_case(name, world, e_local, seed + i)
            received = []

            def recording(x_rows, *rest):
                received.append(x_rows.shape[0])
                return reference_local_experts(x_rows, *rest)
            check_against_reference(rank, world, name, case, e_local, seed + i, 1e-12,
                                    local_experts=recording)
            # the local experts ran on R rows, R from the received counts, not from T
            tokens, sel = case[0], case[1]
            routes = sel[(sel >= 0) & (sel < world * e_local)]
            expected_rows = int((routes // e_local == rank).sum())
            assert received == [expected_rows], (name, rank, received, expected_rows, seed + i)
            if name == "all to one expert":  # the last rank receives every rank's T*k routes
                assert received[0] == (sum(tokens) * K if rank == world - 1 else 0)
            if name == "a rank receives nothing":
                assert rank != 0 or received[0] == 0
        # 3-D x: leading dims are flattened and restored
        case = make_case("3-D x", world, e_local, seed + 10)
        tokens = case[0]
        start = sum(tokens[:rank])
        mine = slice(start, start + tokens[rank])
        x3 = case[3][mine].reshape(1, tokens[rank], H)
        out3 = ep.expert_parallel_moe(x3, case[1][mine].reshape(1, -1, K),
                                      case[2][mine].reshape(1, -1, K),
                                      case[5][rank * e_local:(rank + 1) * e_local],
                                      case[6][rank * e_local:(rank + 1) * e_local],
                                      local_experts=reference_local_experts)
        ref_out, _ = global_reference(*case[1:])
        assert out3.shape == x3.shape and rel(out3[0], ref_out[mine]) < 1e-12, f"seed {seed}"
        # determinism: the same inputs twice give bitwise the same output and gradients
        case = make_case("determinism", world, e_local, seed + 11)
        first = run_rank(rank, world, case, e_local, seed, reference_local_experts)
        again = run_rank(rank, world, case, e_local, seed, reference_local_experts)
        for a, b in zip([first[0]] + first[1], [again[0]] + again[1]):
            assert torch.equal(a, b), f"rank {rank}: not bitwise reproducible (seed {seed})"
        # float32 routing weights with float64 x are accepted (and their grad is float32)
        case = make_case("softmax top-k", world, e_local, seed + 12)
        check_against_reference(rank, world, "fp32 routing weights", case, e_local, seed + 12,
                                1e-6, local_experts=reference_local_experts,
                                rw_dtype=torch.float32)
        # the ranks disagree on E_local: every rank raises, nobody hangs
        x = torch.randn(4, H, dtype=F64)
        sel = torch.zeros(4, K, dtype=torch.int64)
        wgu = torch.randn(2 + rank, 2 * I, H, dtype=F64)
        wd = torch.randn(2 + rank, H, I, dtype=F64)
        try:
            ep.expert_parallel_moe(x, sel, torch.ones(4, K, dtype=F64), wgu, wd,
                                   local_experts=reference_local_experts)
        except moejit.InvalidArgumentError as e:
            assert "disagree on the experts per rank" in str(e), str(e)
        else:
            raise AssertionError(f"rank {rank}: mismatched E_local was accepted")
        # the torch._grouped_mm baseline (what bench/bench_ep.py compares with), float32
        for i, name in enumerate(CASES):
            case = make_case(name, world, e_local, seed + 30 + i)
            check_against_reference(rank, world, "grouped_mm baseline: " + name, case,
                                    e_local, seed + 30 + i, 1e-5,
                                    local_experts=ep.grouped_mm_local_experts,
                                    dtype=torch.float32)
        if emulate:
            emulated_default_local_experts(rank, world, seed + 20)
    finally:
        dist.destroy_process_group()


def emulated_default_local_experts(rank, world, seed):
    """The default local experts (rows grouped by expert, then moejit.torch.experts: the real
    op, wrappers and autograd) with the library's launches emulated in float32 as in
    test_torch_op_emulated.py, in bf16 on gloo, against the float64 global reference."""
    from moejit import _experts_op, _op
    import moe_emulation as emu
    # A forked worker process: patched for its whole life, not through monkeypatch.
    _op._info, _op._forward, _op._backward = (emu.cpu_as_cuda(_op._info), emu.fake_forward,
                                              emu.fake_backward)
    _experts_op._forward, _experts_op._backward = (emu.fake_experts_forward,
                                                   emu.fake_experts_backward)
    e_local = 2
    for i, name in enumerate(CASES):
        case = make_case(name, world, e_local, seed + i)
        check_against_reference(rank, world, "emulated moejit: " + name, case, e_local,
                                seed + i, 1e-2, local_experts=None, dtype=torch.bfloat16,
                                rw_dtype=torch.float32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_processes_match_the_single_process_layer(world):
    seed = fresh_seed()
    # fork is fast, but a forked child cannot run autograd once this process has run any
    # backward pass on a machine with a GPU: the engine then starts a thread per CUDA device,
    # CPU-only graphs included (device run 1 of the 0.8 session: "Unable to handle autograd's
    # threading in combination with fork-based multiprocessing" with CUDA not yet initialised).
    # So fork only where no CUDA device exists (CI), spawn elsewhere.
    fork_ok = sys.platform.startswith("linux") and not torch.cuda.is_available()
    method = os.environ.get("MOEJIT_TEST_START_METHOD") or ("fork" if fork_ok else "spawn")
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)  # the emulated op lives in moe_emulation.py
    tmp.start_processes(worker, args=(world, free_port(), seed, world == 2), nprocs=world,
                        start_method=method, join=True)


def test_moejit_torch_distributed_alias():
    import moejit.torch as mt
    from moejit.torch import distributed
    assert mt.distributed is ep and distributed is ep


def test_bad_arguments_are_clear_errors():
    x = torch.randn(4, H, dtype=F64)
    sel = torch.zeros(4, K, dtype=torch.int64)
    rw = torch.ones(4, K, dtype=F64)
    wgu, wd = torch.randn(2, 2 * I, H, dtype=F64), torch.randn(2, H, I, dtype=F64)
    cases = [
        ((x, sel.float(), rw, wgu, wd), "selected_experts must be int32 or int64"),
        ((x, sel[:, :2], rw, wgu, wd), "routing_weights must have selected_experts' shape"),
        ((x, sel[:3], rw, wgu, wd), r"selected_experts must be \[4, 'k'\]"),
        ((x, sel, rw.to(torch.float16), wgu, wd), "routing_weights must be torch.float64"),
        ((x, sel, rw, wgu[:, :, :5], wd), r"w_gate_up must be this rank's \[E_local, 2I, H=16\]"),
        ((x, sel, rw, wgu, wd[:, :, :3]), r"w_down must be \[E_local, H, I\] = \[2, 16, 8\]"),
        ((x[0], sel, rw, wgu, wd), r"x must be \[T, H\]"),
    ]
    for args, match in cases:
        with pytest.raises(moejit.InvalidArgumentError, match=match):
            ep.expert_parallel_moe(*args)
    if not dist.is_initialized():
        with pytest.raises(moejit.InvalidArgumentError, match="not initialised"):
            ep.expert_parallel_moe(x, sel, rw, wgu, wd)


def test_bench_ep_arguments_and_table():
    """bench/bench_ep.py's argument parsing and table (the timing itself needs 2 GPUs)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                        "bench", "bench_ep.py")
    if not os.path.exists(path):
        pytest.skip(f"{path} not found (tests run from an installed package)")
    spec = importlib.util.spec_from_file_location("bench_ep", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = bench.parse_args(["--shapes", "qwen3-30b-a3b", "--impls", "moejit,grouped_mm"])
    assert args.shapes == ["qwen3-30b-a3b"] and args.impls == ["moejit", "grouped_mm"]
    assert bench.SHAPES["deepseek-v3"] == (256, 7168, 2048, 8, 8192)
    assert bench.SHAPES["qwen3-30b-a3b"] == (128, 2048, 768, 8, 16384)
    with pytest.raises(SystemExit):
        bench.parse_args(["--shapes", "nope"])
    labels = [label for label, _, _ in bench.STAGES]
    # every stage boundary the benchmark reads is one the layer reports
    assert {b for _, a, b in bench.STAGES} | {a for _, a, _ in bench.STAGES} <= set(ep.STAGES)
    report = {"shapes": {"qwen3-30b-a3b": {"results": {
        "moejit": {"ms": {label: 1.0 for label in labels}, "experts_tflops": 500.0},
        "grouped_mm": {"ms": {label: 2.0 for label in labels}, "experts_tflops": 250.0}}}}}
    lines = bench.table(report).splitlines()
    assert lines[0].startswith("| shape | impl | fwd dispatch")
    assert lines[-1].startswith("| qwen3-30b-a3b | speedup | 2.00×")
    assert all(line.count("|") == lines[0].count("|") for line in lines)
