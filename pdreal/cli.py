"""The `pdreal` command.

    pdreal generate [--prompt TEXT ...]   greedy/sampled PD generation on this machine: a prefill
                                          and a decode engine, KV over mooncake|local|fake
    pdreal bench                          prefill / decode step / KV transfer timings here
    pdreal serve [--config F] [k=v ...]   no arguments: a 1P/1D/router cluster here (SmolLM2, CPU);
                                          --colocated N: N colocated instances + router instead;
                                          node.role=prefill|decode|colocated|router: one role
    pdreal replay --url URL [overrides]   open-loop replay of a pdsim workload or trace; writes
                                          trace.parquet + trace.summary.json (pdsim's schema)
    pdreal profile [--out DIR]            step latencies over a grid -> profile.csv (pdsim perf
                                          table) + engine.json (KV capacity, limits, bandwidth)

See docs/PDREAL.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path

log = logging.getLogger(__name__)
DEFAULT_PROMPTS = ["The capital of France is", "def fibonacci(n):"]


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2",
                        help="'smollm2' (real weights) or a catalog name/YAML for seeded random weights")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--attention", default="torch", choices=["torch", "flashinfer"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")


def _source(args: argparse.Namespace):  # noqa: ANN202 - ModelSource
    from pdreal.model.spec import catalog_spec
    from pdreal.model.weights import ModelSource

    if args.model == "smollm2":
        return ModelSource("smollm2", dtype=args.dtype, device=args.device)
    return ModelSource("random", spec=catalog_spec(args.model), dtype=args.dtype, device=args.device)


def cmd_generate(args: argparse.Namespace) -> int:
    import torch

    from pdreal.engine.common import EngineConfig, EngineRequest
    from pdreal.model.sampling import SamplingParams
    from pdreal.model.weights import load_model
    from pdreal.transfer import TransferConfig
    from pdreal.workers import dispatch, gather, start_pair

    torch.set_num_threads(args.threads)
    source = _source(args)
    tokenizer = load_model(source).tokenizer if source.kind == "smollm2" else None
    prompts = args.prompt or DEFAULT_PROMPTS
    encode = (lambda p: tokenizer.encode(p).ids) if tokenizer else (lambda p: [ord(c) % 256 for c in p])
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_p=args.top_p, seed=args.seed)
    reqs = [EngineRequest(i, tuple(encode(p)), sampling, bootstrap_room=i + 1) for i, p in enumerate(prompts)]
    engine = EngineConfig(num_pages=args.num_pages, attention=args.attention, dtype=args.dtype, device=args.device)
    prefill, decode = start_pair(source, engine, EngineConfig(**{**asdict(engine), "instance_id": 1}),
                                 TransferConfig(backend=args.backend))
    try:
        dispatch(prefill, decode, reqs)
        results = gather(prefill, decode, [r.request_id for r in reqs])
    finally:
        prefill.stop()
        decode.stop()
    for req, prompt in zip(reqs, prompts, strict=True):
        result = results[req.request_id]
        text = tokenizer.decode(result.token_ids) if tokenizer else str(result.token_ids)
        row = result.row
        print(f"{prompt!r} -> {text!r}  [{row['status']}, ttft-in-engine "
              f"{row['first_token_s'] - row['bootstrap_enter_s']:.3f} s]")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import torch

    from pdreal.bench import decode_ms, prefill_ms, transfer_gbps
    from pdreal.engine.common import EngineConfig, ModelRunner
    from pdreal.kv.pool import KVLayout
    from pdreal.model.weights import load_model

    torch.set_num_threads(args.threads)
    source = _source(args)
    runner = ModelRunner(load_model(source).model, EngineConfig(num_pages=args.num_pages, attention=args.attention))
    spec, out = runner.model.spec, {"model": runner.model.spec.name, "threads": args.threads}
    for tokens in args.prefill_tokens:
        out[f"prefill_ms_{tokens}"] = round(prefill_ms(runner, tokens), 2)
    for batch in args.decode_batch:
        out[f"decode_ms_batch{batch}_ctx{args.context}"] = round(decode_ms(runner, batch, args.context), 2)
    layout = KVLayout(spec.num_layers, args.transfer_pages, 16, spec.num_kv_heads, spec.head_dim, 2)
    for coalesce in (True, False):
        result = transfer_gbps(layout, args.transfer_pages, coalesce, backend=args.backend)
        out[f"transfer_{args.backend}_{'coalesced' if coalesce else 'per_page'}_gbps"] = round(result.gbps, 3)
        out["transfer_bytes"] = result.bytes
    print(json.dumps(out, indent=2))
    return 0


def serve_overrides(args: argparse.Namespace) -> list[str]:
    """The serve config overrides, with --colocated / --schedule spelt as cluster.* keys."""
    overrides = list(args.overrides)
    if args.colocated is not None:
        if args.prefill is not None or args.decode is not None:
            raise ValueError(f"--colocated {args.colocated} excludes --prefill / --decode "
                             f"(got --prefill {args.prefill}, --decode {args.decode})")
        overrides += ["cluster.mode=colocated", f"cluster.colocated={args.colocated}"]
    if args.schedule is not None:
        overrides.append(f"cluster.colocated_schedule={args.schedule}")
    return overrides


def cmd_serve(args: argparse.Namespace) -> int:
    from pdreal.serving.config import load_serve_config
    from pdreal.serving.launch import serve_local
    from pdreal.serving.node import serve_role

    cfg = load_serve_config(args.config, serve_overrides(args))
    if cfg.node.role == "all":
        return serve_local(cfg, args.log_dir, args.prefill or 1, args.decode or 1)
    return serve_role(cfg)


def cmd_replay(args: argparse.Namespace) -> int:
    from pdreal.replay_cli import run_replay_command

    return run_replay_command(args)


def cmd_profile(args: argparse.Namespace) -> int:
    from pdreal.profile import run_profile_command

    return run_profile_command(args)


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="serve a PD or colocated cluster (OpenAI-compatible router)",
                           description="No arguments: prefill, decode and router processes on this machine "
                                       "(SmolLM2 on CPU); prints the router URL. --colocated N: N colocated "
                                       "instances (prefill and decode in one engine) and the router instead. "
                                       "With node.role=prefill|decode|colocated|router: that one role "
                                       "(multi-node clusters, see docs/PDREAL.md).")
    serve.add_argument("--config", help="serve YAML (node/cluster/policy/slo/faults groups)")
    serve.add_argument("--log-dir", type=Path, help="write each child's log there (role=all)")
    serve.add_argument("--prefill", type=int, metavar="P", help="prefill instances (role=all; default 1)")
    serve.add_argument("--decode", type=int, metavar="D", help="decode instances (role=all; default 1)")
    serve.add_argument("--colocated", type=int, metavar="N",
                       help="N colocated instances instead of prefill + decode (= cluster.mode=colocated "
                            "cluster.colocated=N; excludes --prefill/--decode)")
    serve.add_argument("--schedule", choices=["mixed", "prefill_priority"],
                       help="colocated schedule (= cluster.colocated_schedule; default mixed): mixed = "
                            "chunked-prefill batches with the decodes, prefill_priority = prefill batches alone")
    serve.add_argument("overrides", nargs="*", help="key=value, e.g. node.model=smollm2 policy=least_loaded "
                                                    "cluster.page_size_tokens=16 faults.heartbeat_interval_s=1")
    serve.set_defaults(func=cmd_serve)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pdreal", description="real prefill/decode engine")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="PD-disaggregated generation on this machine")
    _model_args(gen)
    gen.add_argument("--prompt", action="append", help="prompt text (repeatable)")
    gen.add_argument("--max-new-tokens", type=int, default=16)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--backend", default="mooncake", choices=["mooncake", "fake"])
    gen.add_argument("--num-pages", type=int, default=256)
    gen.set_defaults(func=cmd_generate)
    bench = sub.add_parser("bench", help="prefill, decode-step and KV-transfer timings")
    _model_args(bench)
    bench.add_argument("--prefill-tokens", type=int, nargs="+", default=[128, 512])
    bench.add_argument("--decode-batch", type=int, nargs="+", default=[1, 8])
    bench.add_argument("--context", type=int, default=128, help="decode context tokens per sequence")
    bench.add_argument("--transfer-pages", type=int, default=256)
    bench.add_argument("--backend", default="mooncake", choices=["mooncake", "local"])
    bench.add_argument("--num-pages", type=int, default=256)
    bench.set_defaults(func=cmd_bench)
    _serve_parser(sub)
    from pdreal.profile import add_profile_parser
    from pdreal.replay_cli import add_replay_parser

    add_replay_parser(sub, cmd_replay)
    add_profile_parser(sub, cmd_profile)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, TimeoutError, RuntimeError) as exc:
        print(f"pdreal {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
