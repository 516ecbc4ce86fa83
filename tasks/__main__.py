"""Command line: `python -m tasks <stage>` runs one stage; `check`, `graph`, `plan` inspect the run's definition;
`reports` serves reports/ on 127.0.0.1."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specs import Params, ParamsError, load_params
from specs.batch import BatchGeometry
from tasks.core import graph


def _root(args: argparse.Namespace) -> Path:
    return Path(args.root).resolve()


def cmd_check(args: argparse.Namespace) -> int:
    root = _root(args)
    problems: list[str] = []
    try:
        params = load_params(root / args.params, args.set or ())
    except ParamsError as exc:
        # Named as the user gave it (`params.yaml`), not as the resolved absolute path: the README shows this output.
        where = args.params + (" (with overrides)" if args.set else "")
        problems += [f"{where}: {p}" for p in exc.problems]
        params = None
    problems += graph.check_dvc_yaml(root)
    if params is not None:
        from specs.params import read_params_file

        problems += graph.missing_param_keys(read_params_file(root / args.params))
        problems += _checkpoint_problems(params, root)
    if problems:
        print("check failed:", *problems, sep="\n  ", file=sys.stderr)
        return 2
    print(f"ok: {args.params} is valid for stages {', '.join(graph.STAGE_NAMES)}; dvc.yaml matches the registry"
          f" (run '{params.run.name}', seed {params.run.seed})")
    return 0


def _checkpoint_problems(params: Params, root: Path) -> list[str]:
    """With `model.init.kind: hf`, what mix, pretrain and sft would refuse after reading the checkpoint's
    config.json: a shape the importer refuses, a chosen sequence length past its positions. `check` read params only, so `mix.seq_len: 2048` beside a
    1,024-position checkpoint passed it and stopped mix, whose outputs DVC had already removed."""
    if params.model.init.kind != "hf":
        return []
    from specs.init import sft_seq_len_problem, user_set
    from tasks.data.mixing.tokenizer import fit_seq_len, max_positions

    folder = Path(params.model.init.path)
    folder = folder if folder.is_absolute() else root / folder
    from tasks.train.hf.hf_import import hf_model_config

    try:
        hf_model_config(folder)  # the shape as pretrain reads it (no weights): model_type, heads, sizes
        fit_seq_len(params.mix.seq_len, folder, "mix.seq_len", "seq_len" in user_set(params.mix))
        limit = max_positions(folder)
    except (ValueError, OSError) as exc:  # HFImportError is a ValueError: a malformed config.json
        return [str(exc)]
    problem = sft_seq_len_problem(params.sft.seq_len, limit)
    return [problem] if problem else []


def cmd_graph(args: argparse.Namespace) -> int:
    root = _root(args)
    if args.write:
        from tasks.core.files import write_text_atomic

        try:        # its data deps come from params.yaml: written from invalid params, they would all be dropped
            load_params(root / "params.yaml")
        except ParamsError as exc:
            print("graph --write: dvc.yaml not written, params.yaml is invalid (its sources name the stages' "
                  "data deps):", *exc.problems, sep="\n  ", file=sys.stderr)
            return 2
        write_text_atomic(root / "dvc.yaml", graph.dvc_yaml_text(root))
        print(f"wrote {root / 'dvc.yaml'}")
        return 0
    for s in graph.STAGES:
        print(f"{s.name:<10} <- {', '.join(s.upstream) or '(sources)'}")
    return 0


# `plan` options the params answer when they are not given: plan for the precision the run trains in and for its
# own world size; every other cluster option takes ClusterSpec's default.
PLAN_DEFAULTS_FROM_PARAMS = {"precision": "the params' pretrain.precision",
                             "mixed_precision": "the params' pretrain.speed.mixed_precision",
                             "compile": "the params' pretrain.speed.compile",
                             "gpus_per_node": "the params' world size (dp × tp × pp) / nodes"}


def add_spec_options(parser: argparse.ArgumentParser, model, defaults_shown: dict[str, str] | None = None) -> None:
    """One `--kebab-case` option per field of the pydantic `model`: the field's type (a Literal as choices), its
    description as help with its default. Left out, an option is absent from the parsed namespace
    (argparse.SUPPRESS), so the model itself applies its default: the fields are the one source."""
    import typing

    for name, f in model.model_fields.items():
        kind, choices = f.annotation, None
        if type(None) in typing.get_args(kind):  # `float | None`: the option takes the float; left out, None
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if typing.get_origin(kind) is typing.Literal:
            choices = list(typing.get_args(kind))
            kind = type(choices[0])
        if kind not in (int, float, str):  # a new field of another type needs its command-line form chosen here
            raise TypeError(f"{model.__name__}.{name}: no command-line option for {f.annotation}")
        default = (defaults_shown or {}).get(name, f.default)
        parser.add_argument("--" + name.replace("_", "-"), type=kind, choices=choices, default=argparse.SUPPRESS,
                            metavar=None if choices else name.upper(),
                            help=f"{f.description} (default: {default})".replace("%", "%%"))


def positive_int(text: str) -> int:
    """An option's whole number ≥ 1 (argparse refuses anything else with exit code 2, naming the option)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number ≥ 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def cluster_from_args(args: argparse.Namespace, params):
    """The ClusterSpec of the given `plan` options (PLAN_DEFAULTS_FROM_PARAMS, then the spec's defaults, fill the
    rest); raises ParamsError naming the option of each invalid value."""
    from pydantic import ValidationError

    from specs.base import describe_errors
    from tasks.train.planning.cluster import ClusterSpec

    given = {name: getattr(args, name) for name in ClusterSpec.model_fields if hasattr(args, name)}
    precision = params.pretrain.precision
    if precision == "auto":  # what `auto` resolves to on the planned devices (as the launcher resolves it)
        precision = "fp32" if given.get("device", ClusterSpec.model_fields["device"].default) == "cpu" else "bf16"
    given.setdefault("precision", precision)
    given.setdefault("mixed_precision", params.pretrain.speed.mixed_precision)  # how bf16 trains: its memory
    given.setdefault("compile", params.pretrain.speed.compile)  # eager blocks hold more weight copies
    given.setdefault("gpus_per_node", max(1, params.parallel.world_size // max(1, given.get("nodes", 1))))
    if "memory_gb" not in given and "device" in given:     # an L4 has 24 GB, not the field's default 80
        from tasks.train.planning.plan_memory import device_memory_gb
        if (memory := device_memory_gb(given["device"])) is not None:
            given["memory_gb"] = memory
    try:
        return ClusterSpec(**given)
    except ValidationError as exc:
        lines = []
        for line in describe_errors(exc, ClusterSpec):
            key, sep, rest = line.partition(": ")
            lines.append(f"--{key.replace('_', '-')}: {rest}" if sep and key in ClusterSpec.model_fields else line)
        raise ParamsError(lines, "the cluster given to plan") from None


def plan_constraints(params, keys: list[str]) -> dict:
    """The recipe fields `--fix KEY …` keeps at the params' values (RECIPE_KEYS names); raises ParamsError
    naming an unknown key."""
    from tasks.train.planning.plan_result import RECIPE_KEYS

    fixed, bad = {}, [k for k in keys if k not in RECIPE_KEYS]
    if bad:
        raise ParamsError([f"--fix {k}: not a recipe key; one of {', '.join(RECIPE_KEYS)}" for k in bad],
                          "the plan command")
    for key in keys:
        section, name = key.split(".")
        fixed[RECIPE_KEYS[key]] = getattr(getattr(params, section), name)
    return fixed


def cmd_plan(args: argparse.Namespace) -> int:
    """The training recipe (layout, ZeRO, micro-batch, accumulation, checkpointing, sequence parallelism) for
    the params' model on a described cluster at a global batch: every layout's best recipe with its memory and
    estimated step time, the fastest that fits, as overrides to paste (--json: machine-readable); with
    --measure, the measured speed of every layout that runs on the local ranks (tasks/train/planning/measure.py)."""
    from tasks.train.planning.plan_render import plan_dict, render_plan
    from tasks.train.planning.planner import MEMORY_SAFETY, TIE_TOLERANCE, search, validate_layout

    root = _root(args)
    try:
        params = load_params(root / args.params, args.set or ())
        cluster = cluster_from_args(args, params)
        fixed = plan_constraints(params, args.fix or [])
    except ParamsError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.measure:  # time real steps of each layout on the local ranks instead of estimating memory
        from tasks.train.planning.measure import run_measure

        return run_measure(params, ranks=args.ranks, steps=args.measure_steps, memory_gb=cluster.memory_gb,
                           precision=cluster.precision, cluster=cluster)
    p, train = params.parallel, params.pretrain
    # The params' own global batch unless one is given: the batch is a training hyperparameter, the recipe
    # only how to run it.
    global_batch = args.global_batch if args.global_batch is not None else BatchGeometry.of(train, p).global_batch
    try:
        result = search(params.model, cluster, vocab_size=params.mix.tokenizer.vocab_size,
                        seq_len=params.mix.seq_len, global_batch=global_batch, fixed=fixed)
        own = validate_layout(params.model, p, cluster.world_size, cluster.gpus_per_node)
    except (ValueError, OSError) as exc:  # a checkpoint's config.json (HFImportError): named, not a traceback
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    if args.json:
        import json

        layout = {"dp": p.dp, "tp": p.tp, "pp": p.pp, "zero_stage": p.zero_stage, "problems": own}
        print(json.dumps({**plan_dict(result, MEMORY_SAFETY, TIE_TOLERANCE), "params_layout": layout}, indent=2,
                         ensure_ascii=False, allow_nan=False))
    else:
        print(render_plan(result))
        print(f"\nparams.yaml's own layout dp={p.dp} tp={p.tp} pp={p.pp} zero_stage={p.zero_stage}: "
              + ("; ".join(own) if own else "valid for this cluster")
              + (" (the recipe above replaces it)" if own and result.chosen else ""))
    # A plan that was found is the answer, whatever params.yaml's own layout says (printed above).
    return 0 if result.chosen is not None else 2


def cmd_stage(args: argparse.Namespace) -> int:
    """`python -m tasks <stage>`: the stage entry's run (tasks/core/run.py, what dvc.yaml runs); `review
    --interactive` instead walks the spot-check sample with a human."""
    if getattr(args, "interactive", False):
        from tasks.review import review_cli

        return review_cli(_root(args), target=args.target, reviewer=args.reviewer, params_file=args.params)
    from tasks.core.run import run

    return run(args.command, _root(args), args.params)


def cmd_reports(args: argparse.Namespace) -> int:
    from tasks.core.reports_server import ENV, reports_server

    server = reports_server(_root(args), args.host, args.port)
    host, port = server.server_address[:2]
    print(f"Serving {_root(args) / graph.REPORTS_DIR} on http://{host}:{port}/ (Ctrl-C stops it).\n"
          f"For links in the Prefect UI, start the flow/worker/serve process with: export {ENV}=http://{host}:{port}",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def cmd_tiny_checkpoint(args: argparse.Namespace) -> int:
    from tasks.train.hf.tiny_checkpoint import CHATML, embedded_texts, make_checkpoint

    folder = Path(args.root) / args.folder
    make_checkpoint(folder, embedded_texts(), family=args.family, chat_template=None if args.no_chat_template
                    else CHATML)
    print(f"wrote {folder} ({args.family}{', no chat template' if args.no_chat_template else ', ChatML template'})"
          f": set model.init: {{kind: hf, path: {args.folder}}} in params.yaml")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tasks", description=__doc__)
    parser.add_argument("--root", default=".", help="project root (holds params.yaml and dvc.yaml)")
    parser.add_argument("--params", default="params.yaml", help="params file, relative to the root")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate params.yaml (+ overrides) and dvc.yaml; non-zero on error")
    check.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                       help="overrides, e.g. ingest.max_doc_chars=5000 (several after one --set, or --set again)")
    check.set_defaults(func=cmd_check)
    g = sub.add_parser("graph", help="show the stage graph, or --write dvc.yaml from the registry")
    g.add_argument("--write", action="store_true")
    g.set_defaults(func=cmd_graph)
    pl = sub.add_parser("plan", help="the training recipe (layout, ZeRO, micro-batch, checkpointing) estimated "
                        "fastest that fits a cluster, as overrides to paste")
    pl.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                    help="params overrides, e.g. a shape: --set model.n_layers=80 model.d_model=8192 (several after "
                    "one --set, or --set again)")
    from tasks.train.planning.cluster import ClusterSpec

    add_spec_options(pl, ClusterSpec, PLAN_DEFAULTS_FROM_PARAMS)  # the cluster, from its spec's fields
    pl.add_argument("--json", action="store_true",
                    help="print the plan as JSON: every layout ranked by estimated time per token, with its "
                    "memory, step-time breakdown and reasons")
    pl.add_argument("--global-batch", type=positive_int, default=None, metavar="SEQUENCES",
                    help="sequences per optimizer step, shared by every recipe (micro_batch × grad_accum × dp); "
                    "default: the params' own (pretrain.micro_batch_size × grad_accum × parallel.dp)")
    pl.add_argument("--fix", action="extend", nargs="+", metavar="KEY",
                    help="keep the params' value of a recipe key instead of searching it (with --set to give "
                    "one), e.g. --fix pretrain.micro_batch_size pretrain.activation_checkpointing; keys: "
                    "parallel.dp/tp/pp/zero_stage/sequence_parallel, pretrain.micro_batch_size/grad_accum/"
                    "activation_checkpointing")
    pl.add_argument("--measure", action="store_true",
                    help="time a few real training steps of every layout on the local ranks; pick the fastest")
    pl.add_argument("--ranks", type=int, default=None,
                    help="--measure: most local ranks (default: the GPUs, or the CPU count capped at 4)")
    pl.add_argument("--measure-steps", type=int, default=5, help="--measure: timed steps per layout")
    pl.set_defaults(func=cmd_plan)
    tc = sub.add_parser("tiny-checkpoint", help="write a tiny random Hugging Face checkpoint folder (Llama, "
                        "ChatML template) to try model.init.kind: hf without a download")
    tc.add_argument("folder", help="where to write it, e.g. checkpoints/hf/tiny-llama")
    tc.add_argument("--family", default="llama", choices=["llama", "mistral", "qwen2", "qwen3", "phi3"],
                    help="the architecture (model_type) of the checkpoint (default: llama)")
    tc.add_argument("--no-chat-template", action="store_true",
                    help="leave the chat template out (SFT then uses forgeline's chat markers)")
    tc.set_defaults(func=cmd_tiny_checkpoint)
    rp = sub.add_parser("reports", help="serve reports/ (Data Docs, plots) on 127.0.0.1 for the UI's links")
    rp.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    rp.add_argument("--port", type=int, default=8765)
    rp.set_defaults(func=cmd_reports)
    for s in graph.STAGES:
        sp = sub.add_parser(s.name, help=f"run stage {s.name} from params.yaml")
        sp.set_defaults(func=cmd_stage)
        if s.name == "review":
            sp.add_argument("--interactive", action="store_true", help="walk the spot-check sample in this "
                            "terminal and write reviews/<target>.json (terminal mode)")
            sp.add_argument("--target", default=None, help="what is reviewed: pretrain (default) or sft")
            sp.add_argument("--reviewer", default=None, help="your name (default: git user.name)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from tasks.core.run import configure_logging

    args = build_parser().parse_args(argv)
    configure_logging()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
