"""How a plan (tasks/train/planning/planner.py) is shown: the table of layouts with their best recipe, the chosen
recipe as `--set` overrides and a params.yaml fragment to paste, the explanation, and the JSON form.

Reads a plan's attributes only (tasks/train/planning/plan_result.py: the planner imports this module, not the
other way round).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from specs.batch import BatchGeometry
from specs.pretrain import FLAVORS
from tasks.core.files import finite
from tasks.train.planning.plan_cost import describe, device_flops
from tasks.train.planning.plan_memory import GIB

from tasks.train.planning.plan_result import Plan, PlanRow

if TYPE_CHECKING:
    from specs.pretrain import ModelSpec
    from tasks.train.planning.cluster import ClusterSpec


def cost_basis(cluster: ClusterSpec) -> str:
    """The FLOP/s the step times assume, or why there are none."""
    return device_flops(cluster)[1]


def model_label(model: ModelSpec, detail: bool = True) -> str:
    """The flavor's name, or — when a shape key overrides it (`--set model.*`), so the shape is no longer the
    flavor's — `custom shape from <flavor>` and (`detail`) the keys that differ; a Hugging Face checkpoint by its
    folder (its config.json gives the shape, the flavor plays no part)."""
    if model.init.kind == "hf":
        return f"checkpoint {model.init.path}"
    base = FLAVORS[model.flavor]
    changed = [f"{k} {v}" for k, v in model.resolved().items() if v != base[k]]
    if model.ffn_hidden is not None or model.ffn_multiple_of != type(model).model_fields["ffn_multiple_of"].default:
        changed.append(f"ffn_hidden {model.ffn_width()}")
    if not changed:
        return model.flavor
    return f"custom shape from {model.flavor}" + (f": {', '.join(changed)}" if detail else "")


def layout_rows(p: Plan) -> list[PlanRow]:
    """One row per layout × ZeRO stage: the chosen row where it belongs there, else the group's fastest
    eligible recipe, else (nothing fits) its least-memory recipe; layouts rejected before memory as they are."""
    groups: dict[tuple, list[PlanRow]] = {}
    for r in p.rows:
        groups.setdefault((r.dp, r.tp, r.pp, r.zero_stage), []).append(r)
    ranked_pos = {id(r): i for i, r in enumerate(p.ranked)}
    out = []
    for rows in groups.values():
        if p.chosen in rows:
            out.append(p.chosen)
        elif rows[0].memory is None:
            out.append(rows[0])
        elif eligible := [r for r in rows if id(r) in ranked_pos]:
            out.append(min(eligible, key=lambda r: ranked_pos[id(r)]))
        else:
            out.append(min(rows, key=lambda r: r.memory.total))
    return out


def _yaml_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def set_line(row: PlanRow) -> str:
    """The chosen recipe as overrides (`python -m tasks plan/check --set …`, `dvc exp run -S …`)."""
    return "--set " + " ".join(f"{k}={_yaml_value(v)}" for k, v in row.recipe().items())


def params_fragment(row: PlanRow) -> str:
    """The chosen recipe as a params.yaml fragment (merge into the file's `parallel` and `pretrain` sections)."""
    tree: dict[str, Any] = {}
    for key, value in row.recipe().items():
        *sections, name = key.split(".")
        node = tree
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value

    def lines(node: dict[str, Any], depth: int) -> list[str]:
        return [line for name, value in node.items()
                for line in ([f"{'  ' * depth}{name}:", *lines(value, depth + 1)] if isinstance(value, dict)
                             else [f"{'  ' * depth}{name}: {_yaml_value(value)}"])]

    return "\n".join(lines(tree, 0))


def recipe_text(r: PlanRow) -> str:
    sp = ", sequence parallel" if r.sequence_parallel else ""
    return (f"dp={r.dp} tp={r.tp} pp={r.pp} zero_stage={r.zero_stage}, micro_batch {r.micro_batch} × grad_accum "
            f"{r.grad_accum}, checkpointing {r.checkpointing}{sp}")


def render_plan(p: Plan) -> str:
    c = p.cluster
    batch = (f"global batch {p.global_batch} sequences per step" if p.global_batch is not None
             else "each layout keeps its micro_batch × grad_accum per replica")
    fixed = ", ".join(f"{k}={v}" for k, v in p.fixed.items()) or "nothing"
    head = (f"model {p.model_name}, {p.params.total / 1e6:.1f}M parameters "
            f"({p.params.non_embedding / 1e6:.1f}M non-embedding)\n"
            f"cluster: {c.nodes} node(s) × {c.gpus_per_node} {c.device} ({c.memory_gb:g} GiB each, "
            f"{c.intra_node} inside a node, {c.inter_node} between nodes), {c.training_mode}; {batch}\n"
            f"searched {len(p.rows)} recipes (fixed: {fixed}); step time: {p.cost_basis}\n"
            "each line: a layout × ZeRO stage with its best recipe\n")
    cols = (f"{'dp':>5} {'tp':>3} {'pp':>3} {'zero':>4} | {'mb':>3} {'accum':>5} {'ckpt':>4} {'sp':>2} | "
            f"{'params':>7} {'grads':>7} {'optim':>7} {'activ':>7} {'total':>7} GiB | {'s/step':>8} "
            f"{'tokens/s':>11} {'bubble':>6} | fits  | reason")
    lines = [head, cols, "-" * len(cols)]
    for r in layout_rows(p):
        zero = "-" if r.zero_stage is None else str(r.zero_stage)
        if r.memory is None:
            recipe, mem = f"{'':>3} {'':>5} {'':>4} {'':>2}", " ".join(f"{'':>7}" for _ in range(5))
        else:
            sp = "y" if r.sequence_parallel else "-"
            recipe = f"{r.micro_batch:>3} {r.grad_accum:>5} {r.checkpointing:>4} {sp:>2}"
            g = r.memory.breakdown_gib()
            mem = " ".join(f"{g[k]:>7.2f}" for k in ("parameters", "gradients", "optimizer", "activations",
                                                      "total"))
        t = (f"{r.cost.step_s:>8.3g} {r.cost.tokens_per_s:>11,.0f} {r.bubble_share:>6.0%}" if r.cost
             else f"{'':>8} {'':>11} {'':>6}")
        mark = ("yes" if r.fits else "no") + (" *" if r is p.chosen else "")
        lines.append(f"{r.dp:>5} {r.tp:>3} {r.pp:>3} {zero:>4} | {recipe} | {mem}     | {t} | {mark:<5} | "
                     f"{'; '.join(r.reasons)}".rstrip())
    lines.append("")
    if p.chosen is None:
        lines.append("chosen: none fits")
    else:
        lines += [f"chosen: {recipe_text(p.chosen)}", "", "paste as overrides:", "  " + set_line(p.chosen), "",
                  "or into params.yaml:", textwrap.indent(params_fragment(p.chosen), "  "), ""]
    lines += textwrap.wrap("why: " + p.why, width=110)
    return "\n".join(lines)


def plan_dict(p: Plan, memory_safety: float, tie_tolerance: float) -> dict:
    """Machine-readable plan (`python -m tasks plan --json`): the layouts (each with its best recipe), the
    eligible ones ranked fastest first, the chosen recipe with its params keys."""
    shown = layout_rows(p)
    pos = {id(r): i for i, r in enumerate(p.ranked)}
    ranked = sorted((r for r in shown if id(r) in pos), key=lambda r: pos[id(r)])
    rest = [r for r in shown if id(r) not in pos]
    layouts = [{"rank": i + 1, **r.to_dict(), "chosen": r is p.chosen} for i, r in enumerate(ranked)]
    layouts += [{"rank": None, **r.to_dict(), "chosen": False} for r in rest]
    chosen = None
    if p.chosen is not None:
        chosen = {**p.chosen.to_dict(), "recipe": p.chosen.recipe(), "set": set_line(p.chosen),
                  "params_yaml": params_fragment(p.chosen)}
    return finite({"model": p.model_name, "parameters": p.params.total,
                   "cluster": {**p.cluster.model_dump(), "training_mode": p.cluster.training_mode},
                   "global_batch": p.global_batch, "fixed": dict(p.fixed), "recipes_priced": len(p.rows),
                   "cost_model": {"basis": p.cost_basis, "memory_safety": memory_safety,
                                  "tie_tolerance": tie_tolerance},
                   "chosen": chosen, "why": p.why, "candidates": layouts[:len(ranked)], "layouts": layouts})


# A pipeline bubble above this share of the step is worth a warning: a quarter of every stage's time idle
BUBBLE_WARNING = 0.25


def _layout(r: PlanRow) -> str:
    return f"dp={r.dp} tp={r.tp} pp={r.pp} ZeRO-{r.zero_stage}"


def _no_layout(p: Plan) -> str:
    """Why no layout was priced: the fixed axes fit no dp · tp · pp of the cluster's devices, or (the layouts'
    own reasons in the table) divisibility and the global batch."""
    axes = {axis: p.fixed[axis] for axis in ("dp", "tp", "pp") if axis in p.fixed}
    if not p.rows and axes:
        world, fixed = p.cluster.world_size, " ".join(f"parallel.{k}={v}" for k, v in axes.items())
        if len(axes) == 3:
            return (f"the fixed {fixed} make dp × tp × pp = {axes['dp'] * axes['tp'] * axes['pp']} devices, but the "
                    f"cluster has {world} (nodes × gpus-per-node)")
        return f"no dp × tp × pp = {world} (nodes × gpus-per-node) has the fixed {fixed}"
    return "no layout passes the divisibility checks (or the global batch does not divide)"


def explain(p: Plan, model: ModelSpec, seq_len: int, memory_safety: float, tie_tolerance: float) -> str:
    """Why this recipe: its memory, where its time goes, the runner-up, and what each choice buys."""
    cluster, chosen, counts = p.cluster, p.chosen, p.params
    size = f"{model_label(model)} ({counts.total / 1e6:.1f}M parameters)"
    if chosen is None:
        sized = [r for r in p.rows if r.memory is not None]
        best = min(sized, key=lambda r: r.memory.total) if sized else None
        need = (f"the smallest need is {best.memory.total / GIB:.1f} GiB ({recipe_text(best)})" if best
                else _no_layout(p))
        return (f"No layout or recipe of {size} fits {cluster.world_size} × {cluster.memory_gb:g} GiB: {need}. "
                "Free a fixed key (--fix), lower seq_len, change the global batch, or plan for more or larger "
                "devices.")
    m = chosen.memory
    parts = [f"{size} needs {m.total / GIB:.1f} GiB per device with {recipe_text(chosen)} (weights "
             f"{m.parameters / GIB:.1f}, grads {m.gradients / GIB:.1f}, optimizer {m.optimizer / GIB:.1f}, "
             f"activations {m.activations / GIB:.1f}, overhead {m.overhead / GIB:.1f}) of {cluster.memory_gb:g} GiB."]
    if cluster.autocast:
        parts.append("Memory is priced for bf16 through DeepSpeed's torch_autocast, what the engine runs on GPUs "
                     "(pretrain.speed.mixed_precision): fp32 weights and gradients, a bf16 copy of the block "
                     "weights per micro-batch in flight (in activations), fp32 gradient traffic except tp 1's "
                     "linears under ZeRO; --mixed-precision sections prices its bf16 section.")
    if chosen.cost is None:
        parts.append("No step-time estimate for this device; the simplest recipe that fits is taken.")
    else:
        parts.append(f"Estimated {describe(chosen.cost)}.")
        other = next((r for r in p.ranked if (r.dp, r.tp, r.pp) != (chosen.dp, chosen.tp, chosen.pp)), None)
        if other is not None and other.cost is not None:
            slower = other.cost.s_per_token / chosen.cost.s_per_token - 1
            parts.append(f"Best other layout: {recipe_text(other)}, {slower:+.0%} time per token"
                         + (" (a tie within the model's precision: the simplest recipe wins)."
                            if slower <= tie_tolerance else "."))
    if not chosen.within_margin:
        parts.append(f"No recipe leaves {1 - memory_safety:.0%} headroom; this one uses "
                     f"{m.total / (cluster.memory_gb * GIB):.0%} of the device.")
    if chosen.checkpointing != "off":
        plain = [r for r in p.rows if (r.dp, r.tp, r.pp) == (chosen.dp, chosen.tp, chosen.pp)
                 and r.checkpointing == "off" and r.memory is not None]
        if plain and not any(r.within_margin for r in plain):
            least = min(plain, key=lambda r: r.memory.total)
            parts.append(f"Recomputation (one more forward of each recomputed block) is what fits: without it "
                         f"this layout needs at least {least.memory.total / GIB:.1f} GiB.")
    if chosen.pp > 1:
        parts.append(f"The pipeline cuts {p.params.n_layers} layers into {chosen.pp} stages; its 1F1B "
                     f"bubble (pp−1)/(m+pp−1) at m = {chosen.grad_accum} micro-batches is "
                     f"{chosen.bubble_share:.0%} of the step. DeepSpeed allows ZeRO ≤ 1 with a pipeline.")
        if chosen.bubble_share > BUBBLE_WARNING:
            # (pp−1)/(m+pp−1) ≤ 10 % from m = 9·(pp−1) micro-batches per step on: the global batch that gives them
            enough = chosen.micro_batch * 9 * (chosen.pp - 1) * chosen.dp
            parts.append(f"Warning: a {chosen.bubble_share:.0%} bubble idles every stage that long; a global batch "
                         f"of {enough} sequences (m = {9 * (chosen.pp - 1)}) would bring it to 10 %, or plan "
                         "without a pipeline (--fix parallel.pp=1) or on fewer devices.")
    elif chosen.tp == 1:
        parts.append("Data parallel is preferred: every rank runs the whole model and only gradients are "
                     "exchanged.")
    else:
        parts.append(f"Tensor parallel tp={chosen.tp} splits every block's weights and most activations over "
                     f"{chosen.tp} devices of one node ({cluster.intra_node}); its all-reduces sit inside every "
                     "layer.")
    if chosen.zero_stage:
        parts.append(f"ZeRO-{chosen.zero_stage} shards " + {
            1: "the optimizer states", 2: "optimizer states and gradients",
            3: "optimizer states, gradients and weights (re-gathered every forward and backward)"}[chosen.zero_stage]
            + f" over the {chosen.dp} data-parallel ranks.")
    geometry = BatchGeometry(chosen.micro_batch, chosen.grad_accum, chosen.dp)
    parts.append(f"Global batch = micro_batch {chosen.micro_batch} × grad_accum {chosen.grad_accum} × dp "
                 f"{chosen.dp} = {geometry.global_batch} sequences ({geometry.tokens(seq_len):,} tokens) per step.")
    return " ".join(parts)
