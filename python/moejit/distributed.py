"""Expert parallelism (EP) over torch.distributed: the experts of one MoE layer sharded across
the ranks of a process group, tokens sent to the ranks that own their experts with
all_to_all_single, the local experts run on the rows received, the results sent back and
combined per token. Also reachable as moejit.torch.distributed.

    import torch.distributed as dist, moejit.distributed as ep
    dist.init_process_group("nccl")            # NCCL on GPUs; gloo works on CPU tensors
    layer = ep.ExpertParallelMoE(num_experts=256, hidden_size=7168, intermediate_size=2048,
                                 device="cuda", dtype=torch.bfloat16)   # 256 / world per rank
    out = layer(x, selected_experts, routing_weights)   # GLOBAL expert ids, [T, k]

Ownership: with W ranks in the group and E_local experts per rank (w_gate_up [E_local, 2I, H],
w_down [E_local, H, I] on every rank, the same E_local everywhere), group rank r owns the global
experts [r * E_local, (r + 1) * E_local). A global id outside [0, W * E_local) is a dropped
route, as in moejit.h: it is sent nowhere, contributes nothing and gets a zero routing-weight
gradient.

Steps of the forward (one host synchronisation, in step 2):
 1. plan (device, no sync): the T*k routes (route id t*k + j) are sorted stably by global
    expert id, i.e. by (destination rank, local expert, token, slot); dropped routes go last.
 2. counts: one all_to_all_single of a [W, 6] int64 tensor (the rows for each destination,
    plus this rank's E_local, H, dtypes and autograd flags), then ONE device-to-host copy: the
    split sizes of an all_to_all must be on the host. The received metadata is checked against
    this rank's, so a mismatch between ranks is an InvalidArgumentError on every rank instead
    of a hang or garbage.
 3. dispatch: the x rows of the sent routes (in plan order), their routing weights and their
    local expert ids (int32) go out with three all_to_all_single calls. A rank receives
    R = sum of its received counts rows, ordered by (source rank, local expert, source token,
    slot); R is not bounded by its own T (one rank can receive W*T*k rows), and every size
    after this point comes from R.
 4. experts: local_experts(x_rows [R, H], local_ids [R], row_weights [R], w_gate_up, w_down,
    swiglu_limit) -> [R, H], the routing weight applied inside (so d routing_weights comes
    from the expert op's backward). The default groups the rows by local expert (a stable
    device sort, no sync) and runs moejit's pre-dispatched experts entry on them
    (moejit.torch.experts; its grids come from R);
    grouped_mm_local_experts is the torch._grouped_mm baseline; tests pass a float64 one.
 5. combine: the [R, H] results go back with all_to_all_single (the splits of step 3
    reversed), are placed in a [T, k, H] buffer by route (a permutation, no atomics) and summed
    over the k slots with torch.sum (a fixed reduction order).
The backward mirrors it with the split sizes saved by the forward, so it never synchronises
with the host: the output gradient is gathered per route and sent to the expert ranks (the
combine's all_to_all reversed), the local experts' backward runs, and the x-row and
routing-weight gradients come back (the dispatch's all_to_all reversed) and are reduced per
token in the same fixed slot order. There are no atomics and no data-dependent reduction
orders: for a fixed world size and inputs the result is bitwise reproducible (as far as the
local experts are; moejit's are deterministic).

Every rank must call the layer (T = 0 is fine) and, when it trains, run the backward, in the
same order as the other ranks: the collectives of both directions are matched across ranks.
The layer is for eager mode: the host sync of step 2 also rules out CUDA graph capture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, NamedTuple, Optional, Sequence

try:
    import torch
except ImportError as _e:  # fail at the import, saying how to get it (as
    # ModuleNotFoundError, so pytest.importorskip and `except ImportError` both see a missing module)
    raise ModuleNotFoundError(f"moejit.distributed needs PyTorch, which is not importable here ({_e}); "
                      "install it with: pip install moejit[torch]", name="torch") from _e
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from . import errors
from ._functional import _limit, _ops, _require_tensors, experts

__all__ = ["RoutePlan", "route_plan", "combine_routes", "place_routes", "expert_parallel_moe",
           "expert_parallel_grouped_mm", "ExpertParallelMoE", "moejit_local_experts",
           "moejit_layer_local_experts", "group_rows",
           "grouped_mm_local_experts", "LocalExperts", "STAGES"]

# (x_rows [R, H], local_ids [R] int32, row_weights [R], w_gate_up, w_down, swiglu_limit)
#   -> y_rows [R, H], differentiable in x_rows, row_weights and both weights.
LocalExperts = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                         Optional[float]], torch.Tensor]

# What stage_hook(name) is called with, in order (forward, then backward).
STAGES = ("dispatch", "experts", "combine", "end",
          "backward.combine", "backward.experts", "backward.dispatch", "backward.end")

# Dtype codes exchanged with the counts, so ranks can check they agree.
_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
_META_FIELDS = ("rows", "experts per rank (w_gate_up.shape[0])", "hidden size",
                "x dtype", "routing_weights dtype", "autograd flags")


# ------------------------------------------------------------------ the bookkeeping
# Pure functions of one rank's tensors: tests check them against a brute-force simulation of
# W ranks in one process.


class RoutePlan(NamedTuple):
    """One rank's routes in send order (all on selected_experts' device)."""
    order: torch.Tensor        # [T*k] int64: route ids t*k + j sorted by (destination rank,
                               # local expert, t, j); dropped routes (ids outside [0, W*E_local)) last
    send_counts: torch.Tensor  # [W] int64: routes for each destination rank
    local_ids: torch.Tensor    # [T*k] int32: local expert id of order[i] (-1: dropped)


def route_plan(selected_experts: torch.Tensor, world_size: int,
               experts_per_rank: int) -> RoutePlan:
    """The send order of one rank's routes, on the device and without a host sync.
    selected_experts [T, k] (or [..., k]) int32/int64 GLOBAL expert ids."""
    num_experts = world_size * experts_per_rank
    flat = selected_experts.reshape(-1).long()
    valid = (flat >= 0) & (flat < num_experts)
    key = torch.where(valid, flat, torch.full_like(flat, num_experts))
    # A stable sort of the global id keeps the route-id order (t, j) within an expert, so the
    # result is sorted by (rank, local expert, t, j) and is the same on every run.
    order = torch.sort(key, stable=True).indices
    sorted_key = key.index_select(0, order)
    dest = torch.div(sorted_key, experts_per_rank, rounding_mode="floor")  # dropped: W
    counts = torch.zeros(world_size + 1, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, dest, torch.ones_like(dest))  # bincount would sync for its size
    local = torch.where(sorted_key < num_experts, sorted_key - dest * experts_per_rank,
                        torch.full_like(sorted_key, -1))
    return RoutePlan(order, counts[:world_size], local.to(torch.int32))


def place_routes(rows: torch.Tensor, routes: torch.Tensor, num_tokens: int,
                 top_k: int) -> torch.Tensor:
    """rows [n, ...] of the routes `routes` [n] (distinct route ids) -> [T, k, ...], zero for
    the routes not given (dropped). A permutation into place: no atomics."""
    out = rows.new_zeros((num_tokens * top_k,) + tuple(rows.shape[1:]))
    out.index_copy_(0, routes, rows)
    return out.view((num_tokens, top_k) + tuple(rows.shape[1:]))


def combine_routes(rows: torch.Tensor, routes: torch.Tensor, num_tokens: int,
                   top_k: int) -> torch.Tensor:
    """The per-token sum of route rows: rows [n, H] of routes [n] -> [T, H], summed over the k
    slots by torch.sum (a fixed order for a fixed shape; no atomics)."""
    return place_routes(rows, routes, num_tokens, top_k).sum(dim=1)


# ------------------------------------------------------------------ local experts


def group_rows(local_ids: torch.Tensor, num_experts: int):
    """The received rows grouped by local expert, on the device and without a host sync:
    (order [R] int64, the rows in expert order (a stable sort, so within an expert the receive
    order is kept); offsets int32 [E_local + 1], expert e's rows at [offsets[e], offsets[e+1]))."""
    ids = local_ids.long()
    order = torch.sort(ids, stable=True).indices
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=ids.device)
    counts.scatter_add_(0, ids + 1, torch.ones_like(ids))  # bincount would sync for its size
    return order, torch.cumsum(counts, 0).to(torch.int32)


def moejit_local_experts(x_rows: torch.Tensor, local_ids: torch.Tensor,
                         row_weights: torch.Tensor, w_gate_up: torch.Tensor,
                         w_down: torch.Tensor, swiglu_limit: Optional[float] = None
                         ) -> torch.Tensor:
    """The local experts on the received rows through moejit's pre-dispatched experts entry
    (moejit.torch.experts, moejit_plan_experts_* in moejit.h): the rows grouped by local
    expert (group_rows), the experts run over R rows with the routing weights inside, and the
    results put back in receive order. Every grid comes from R."""
    order, offsets = group_rows(local_ids, w_gate_up.shape[0])
    xs = x_rows.index_select(0, order)
    ws = row_weights.index_select(0, order).float()
    ys = experts(xs, offsets, w_gate_up, w_down, ws, swiglu_limit)
    # The inverse permutation: receive position order[i] gets sorted row i.
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(),
                                                                      device=order.device))
    return ys.index_select(0, inverse)


def moejit_layer_local_experts(x_rows: torch.Tensor, local_ids: torch.Tensor,
                               row_weights: torch.Tensor, w_gate_up: torch.Tensor,
                               w_down: torch.Tensor, swiglu_limit: Optional[float] = None
                               ) -> torch.Tensor:
    """The local experts through moejit's whole layer with top_k = 1 (its routing index,
    scatter and gather of one route per row instead of group_rows): what the pre-dispatched
    entry saves, for benchmarks."""
    where = "moejit.distributed.moejit_layer_local_experts"
    _require_tensors(where, x_rows=x_rows, local_ids=local_ids, row_weights=row_weights,
                     w_gate_up=w_gate_up, w_down=w_down)
    rows = x_rows.shape[0]
    # moejit.torch.fused_moe_merged's plain SwiGLU call: the same op, the same checks.
    out, _ = _ops.fused_moe_merged(x_rows, local_ids.view(rows, 1), row_weights.view(rows, 1),
                                   w_gate_up, w_down, _limit(where, swiglu_limit))
    return out


def grouped_mm_local_experts(x_rows: torch.Tensor, local_ids: torch.Tensor,
                             row_weights: torch.Tensor, w_gate_up: torch.Tensor,
                             w_down: torch.Tensor, swiglu_limit: Optional[float] = None
                             ) -> torch.Tensor:
    """The baseline: the local experts through torch._grouped_mm (rows grouped by expert with
    group_rows, one grouped GEMM per projection, SwiGLU with moejit's limit in between, the
    routing weight on h as moejit applies it); differentiable by autograd."""
    rows = x_rows.shape[0]
    if rows == 0:
        # Nothing to multiply; keep the weights in the graph so they get (zero) gradients.
        link = (w_gate_up.sum() + w_down.sum() + row_weights.sum()).to(x_rows.dtype) * 0
        return x_rows * 0 + link  # [0, H]
    order, offsets = group_rows(local_ids, w_gate_up.shape[0])
    ends = offsets[1:]  # torch._grouped_mm's offs: each group's end row
    xs = x_rows.index_select(0, order)
    inter = w_gate_up.shape[1] // 2
    gu = torch._grouped_mm(xs, w_gate_up.transpose(-2, -1), offs=ends)
    g, u = gu[:, :inter], gu[:, inter:]
    if swiglu_limit is not None:
        g, u = g.clamp(max=swiglu_limit), u.clamp(min=-swiglu_limit, max=swiglu_limit)
    h = F.silu(g) * u * row_weights.index_select(0, order).unsqueeze(1).to(g.dtype)
    ys = torch._grouped_mm(h, w_down.transpose(-2, -1), offs=ends)
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(),
                                                                      device=order.device))
    return ys.index_select(0, inverse)


# ------------------------------------------------------------------ transport


def _all_to_all(rows: torch.Tensor, out_splits: List[int], in_splits: List[int],
                group) -> torch.Tensor:
    """torch.distributed.all_to_all_single with uneven splits along dim 0 (NCCL on CUDA
    tensors, gloo on CPU tensors both implement it)."""
    out = rows.new_empty((sum(out_splits),) + tuple(rows.shape[1:]))
    dist.all_to_all_single(out, rows.contiguous(), out_splits, in_splits, group=group)
    return out


@dataclass
class _Exchange:
    """What both directions need: the host split sizes (from the forward's one sync) and the
    send order."""
    group: object
    send_splits: List[int]   # rows to each rank
    recv_splits: List[int]   # rows from each rank
    send_routes: torch.Tensor  # [n_send] route ids, in send order
    send_tokens: torch.Tensor  # [n_send] their tokens
    num_tokens: int
    top_k: int
    hook: Optional[Callable[[str], None]]

    def mark(self, stage: str) -> None:
        if self.hook is not None:
            self.hook(stage)


class _Dispatch(torch.autograd.Function):
    """x [T, H], routing weights [T*k] -> the received x rows [R, H] and weights [R].
    Backward: the row gradients go back (the all_to_all reversed) and are reduced per token
    in the fixed slot order."""

    @staticmethod
    def forward(ctx, x, rw_flat, ex: _Exchange):
        ctx.ex = ex
        x_send = x.index_select(0, ex.send_tokens)
        w_send = rw_flat.index_select(0, ex.send_routes)
        x_recv = _all_to_all(x_send, ex.recv_splits, ex.send_splits, ex.group)
        w_recv = _all_to_all(w_send, ex.recv_splits, ex.send_splits, ex.group)
        return x_recv, w_recv

    @staticmethod
    def backward(ctx, gx_recv, gw_recv):
        ex = ctx.ex
        ex.mark("backward.dispatch")
        # Both exchanges always run, whatever this rank's needs_input_grad says: the
        # collectives must match across ranks (the count exchange checked the flags agree).
        gx_send = _all_to_all(gx_recv, ex.send_splits, ex.recv_splits, ex.group)
        gw_send = _all_to_all(gw_recv, ex.send_splits, ex.recv_splits, ex.group)
        dx = combine_routes(gx_send, ex.send_routes, ex.num_tokens, ex.top_k)
        drw = place_routes(gw_send, ex.send_routes, ex.num_tokens, ex.top_k).reshape(-1)
        ex.mark("backward.end")
        return dx, drw, None


class _Combine(torch.autograd.Function):
    """The expert outputs [R, H] -> out [T, H]: back to the sending ranks, summed per token.
    Backward: the output gradient of each route goes to the rank that ran it."""

    @staticmethod
    def forward(ctx, y_recv, ex: _Exchange):
        ctx.ex = ex
        y_back = _all_to_all(y_recv, ex.send_splits, ex.recv_splits, ex.group)
        return combine_routes(y_back, ex.send_routes, ex.num_tokens, ex.top_k)

    @staticmethod
    def backward(ctx, grad_out):
        ex = ctx.ex
        ex.mark("backward.combine")
        g_send = grad_out.index_select(0, ex.send_tokens)
        g_recv = _all_to_all(g_send, ex.recv_splits, ex.send_splits, ex.group)
        ex.mark("backward.experts")
        return g_recv, None


# ------------------------------------------------------------------ the layer


def _fail(where: str, message: str):
    raise errors.InvalidArgumentError(f"{where}: {message}")


def _check(where, x, selected_experts, routing_weights, w_gate_up, w_down):
    for name, t in (("x", x), ("selected_experts", selected_experts),
                    ("routing_weights", routing_weights), ("w_gate_up", w_gate_up),
                    ("w_down", w_down)):
        if not isinstance(t, torch.Tensor):
            _fail(where, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() < 2:
        _fail(where, f"x must be [T, H] (or [..., H]), got shape {list(x.shape)}")
    hidden = x.shape[-1]
    lead = tuple(x.shape[:-1])
    if selected_experts.dim() != x.dim() or tuple(selected_experts.shape[:-1]) != lead:
        _fail(where, f"selected_experts must be {list(lead) + ['k']} to match x "
                     f"{list(x.shape)}, got {list(selected_experts.shape)}")
    if selected_experts.shape[-1] < 1:
        _fail(where, f"top_k (the last dim of selected_experts) must be >= 1, got "
                     f"{selected_experts.shape[-1]}")
    if selected_experts.dtype not in (torch.int32, torch.int64):
        _fail(where, f"selected_experts must be int32 or int64 (global expert ids), got "
                     f"{selected_experts.dtype}")
    if tuple(routing_weights.shape) != tuple(selected_experts.shape):
        _fail(where, f"routing_weights must have selected_experts' shape "
                     f"{list(selected_experts.shape)}, got {list(routing_weights.shape)}")
    if routing_weights.dtype not in (x.dtype, torch.float32):
        _fail(where, f"routing_weights must be {x.dtype} (like x) or torch.float32, got "
                     f"{routing_weights.dtype}")
    if x.dtype not in _DTYPES:
        _fail(where, f"x must be one of {[str(d) for d in _DTYPES]}, got {x.dtype}")
    if w_gate_up.dim() != 3 or w_gate_up.shape[0] < 1 or w_gate_up.shape[1] % 2 or \
            w_gate_up.shape[2] != hidden:
        _fail(where, f"w_gate_up must be this rank's [E_local, 2I, H={hidden}] (E_local >= 1, "
                     f"gate rows first), got {list(w_gate_up.shape)}")
    e_local, inter = w_gate_up.shape[0], w_gate_up.shape[1] // 2
    if tuple(w_down.shape) != (e_local, hidden, inter):
        _fail(where, f"w_down must be [E_local, H, I] = {[e_local, hidden, inter]}, got "
                     f"{list(w_down.shape)}")
    for name, t in (("selected_experts", selected_experts),
                    ("routing_weights", routing_weights), ("w_gate_up", w_gate_up),
                    ("w_down", w_down)):
        if t.device != x.device:
            _fail(where, f"{name} is on {t.device} but x is on {x.device}; every tensor must "
                         "be on this rank's device")
    return e_local


def _exchange_counts(where, plan: RoutePlan, meta: Sequence[int], world: int, rank: int,
                     group, device) -> tuple:
    """Step 2: one all_to_all_single of [W, 6] int64 (counts + metadata), one host copy.
    Returns (send_splits, recv_splits) as host lists."""
    send = torch.empty(world, 6, dtype=torch.int64, device=device)
    send[:, 0] = plan.send_counts
    for field, value in enumerate(meta, 1):
        send[:, field] = value  # a fill with a scalar: no host-to-device copy, no sync
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    host = torch.cat([plan.send_counts, recv.reshape(-1)]).tolist()  # THE host sync
    send_splits = host[:world]
    received = [host[world + 6 * s: world + 6 * (s + 1)] for s in range(world)]
    for s, row in enumerate(received):
        for field in range(1, 6):
            if row[field] != meta[field - 1]:
                _fail(where, f"the ranks disagree on the {_META_FIELDS[field]}: rank {s} has "
                             f"{_describe(field, row[field])}, rank {rank} (this one) has "
                             f"{_describe(field, meta[field - 1])}; every rank must pass the "
                             "same layer shape, dtypes and requires_grad settings")
    return send_splits, [row[0] for row in received]


def _describe(field: int, value: int) -> str:
    if field in (3, 4):
        return str(_DTYPES[value]) if 0 <= value < len(_DTYPES) else f"dtype code {value}"
    if field == 5:
        return (f"x/routing_weights need grad = {bool(value & 1)}, "
                f"weights need grad = {bool(value & 2)}")
    return str(value)


def expert_parallel_moe(x: torch.Tensor, selected_experts: torch.Tensor,
                        routing_weights: torch.Tensor, w_gate_up: torch.Tensor,
                        w_down: torch.Tensor, swiglu_limit: Optional[float] = None, *,
                        group=None, local_experts: Optional[LocalExperts] = None,
                        stage_hook: Optional[Callable[[str], None]] = None) -> torch.Tensor:
    """The expert-parallel MoE layer on this rank (every rank of `group` calls it).

    x [..., H]; selected_experts [..., k] int32/int64 GLOBAL expert ids (outside
    [0, W*E_local): dropped); routing_weights [..., k] float32 or x's dtype; w_gate_up
    [E_local, 2I, H] and w_down [E_local, H, I]: this rank's experts, the global ids
    [rank*E_local, (rank+1)*E_local) of `group` (None: the default group). Returns out [..., H]
    for this rank's tokens, differentiable in x, routing_weights and the local weights.

    local_experts: the function that runs the local experts on the received rows (see
    LocalExperts; default moejit_local_experts). stage_hook: called with each name of STAGES
    as that stage begins (benchmarks record CUDA events there). One host sync per forward (the
    count exchange); none in the backward.
    """
    where = "moejit.distributed.expert_parallel_moe"
    e_local = _check(where, x, selected_experts, routing_weights, w_gate_up, w_down)
    if not dist.is_available() or not dist.is_initialized():
        _fail(where, "torch.distributed is not initialised (call "
                     "torch.distributed.init_process_group first)")
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:
        _fail(where, "this process is not a member of `group`")
    backend = str(dist.get_backend(group))
    if backend == "nccl" and x.device.type != "cuda":
        _fail(where, f"the group's backend is nccl, which moves CUDA tensors only, but x is on "
                     f"{x.device}; put the layer's tensors on this rank's GPU")
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        _fail(where, "the expert-parallel layer cannot be captured in a CUDA graph: its count "
                     "exchange copies the split sizes to the host (run it eagerly)")
    if local_experts is None:
        local_experts = moejit_local_experts
    hidden, top_k = x.shape[-1], selected_experts.shape[-1]
    x2d = x.reshape(-1, hidden)
    tokens = x2d.shape[0]
    rw_flat = routing_weights.reshape(-1)
    grad = torch.is_grad_enabled()
    flags = (int(grad and (x.requires_grad or routing_weights.requires_grad))
             | 2 * int(grad and (w_gate_up.requires_grad or w_down.requires_grad)))

    if stage_hook is not None:
        stage_hook("dispatch")
    plan = route_plan(selected_experts, world, e_local)
    send_splits, recv_splits = _exchange_counts(
        where, plan, (e_local, hidden, _DTYPES.index(x.dtype),
                      _DTYPES.index(routing_weights.dtype), flags),
        world, rank, group, x.device)
    n_send = sum(send_splits)
    send_routes = plan.order[:n_send]
    ex = _Exchange(group=group, send_splits=send_splits, recv_splits=recv_splits,
                   send_routes=send_routes,
                   send_tokens=torch.div(send_routes, top_k, rounding_mode="floor"),
                   num_tokens=tokens, top_k=top_k, hook=stage_hook)
    local_ids = _all_to_all(plan.local_ids[:n_send], recv_splits, send_splits, group)
    x_recv, w_recv = _Dispatch.apply(x2d, rw_flat, ex)

    ex.mark("experts")
    y_recv = local_experts(x_recv, local_ids, w_recv, w_gate_up, w_down, swiglu_limit)
    rows = sum(recv_splits)
    if tuple(y_recv.shape) != (rows, hidden):
        raise errors.InternalError(
            f"{where}: local_experts returned shape {list(y_recv.shape)}, expected "
            f"[R={rows}, H={hidden}]")

    ex.mark("combine")
    out = _Combine.apply(y_recv.to(x.dtype), ex)
    ex.mark("end")
    return out.view(x.shape)


def expert_parallel_grouped_mm(x, selected_experts, routing_weights, w_gate_up, w_down,
                               swiglu_limit=None, *, group=None, stage_hook=None):
    """The torch._grouped_mm baseline: the same dispatch and combine as expert_parallel_moe,
    the local experts through grouped_mm_local_experts."""
    return expert_parallel_moe(x, selected_experts, routing_weights, w_gate_up, w_down,
                               swiglu_limit, group=group, local_experts=grouped_mm_local_experts,
                               stage_hook=stage_hook)


class ExpertParallelMoE(nn.Module):
    """This rank's share of an expert-parallel MoE layer: the experts
    [rank*E_local, (rank+1)*E_local) of num_experts (global; divisible by the group's size), as
    merged fc1 (w_gate_up [E_local, 2I, H]) and w_down [E_local, H, I] parameters. The router
    stays outside: forward(x [..., H], selected_experts [..., k] global ids, routing_weights
    [..., k]) -> [..., H]. local_experts: as for expert_parallel_moe (an attribute; replace it
    to change the expert implementation)."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, *,
                 group=None, swiglu_limit: Optional[float] = None,
                 local_experts: Optional[LocalExperts] = None, device=None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        where = "ExpertParallelMoE"
        for name, value in (("num_experts", num_experts), ("hidden_size", hidden_size),
                            ("intermediate_size", intermediate_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                _fail(where, f"{name} must be a positive int, got {value!r}")
        if not dist.is_available() or not dist.is_initialized():
            _fail(where, "torch.distributed is not initialised (call "
                         "torch.distributed.init_process_group first)")
        world = dist.get_world_size(group)
        if num_experts % world:
            _fail(where, f"num_experts must be a multiple of the group's size {world}, got "
                         f"{num_experts}")
        self.group = group
        self.num_experts = num_experts
        self.experts_per_rank = num_experts // world
        self.first_expert = dist.get_rank(group) * self.experts_per_rank
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.swiglu_limit = swiglu_limit
        self.local_experts = local_experts or moejit_local_experts
        factory = {"device": device, "dtype": dtype or torch.bfloat16}
        e, h, i = self.experts_per_rank, hidden_size, intermediate_size
        self.w_gate_up = nn.Parameter(torch.empty(e, 2 * i, h, **factory))
        self.w_down = nn.Parameter(torch.empty(e, h, i, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():  # nn.Linear's default range, per expert
            self.w_gate_up.uniform_(-self.hidden_size ** -0.5, self.hidden_size ** -0.5)
            self.w_down.uniform_(-self.intermediate_size ** -0.5,
                                 self.intermediate_size ** -0.5)

    def forward(self, x: torch.Tensor, selected_experts: torch.Tensor,
                routing_weights: torch.Tensor, stage_hook=None) -> torch.Tensor:
        return expert_parallel_moe(x, selected_experts, routing_weights, self.w_gate_up,
                                   self.w_down, self.swiglu_limit, group=self.group,
                                   local_experts=self.local_experts, stage_hook=stage_hook)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts} (local {self.first_expert}.."
                f"{self.first_expert + self.experts_per_rank - 1}), "
                f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}"
                + (f", swiglu_limit={self.swiglu_limit}" if self.swiglu_limit else ""))
