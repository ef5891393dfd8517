"""The check process: read the spec, probe the device, run each check and write its
result as one JSON line, flushed as it finishes."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import standin
from .registry import (
    ERROR,
    REGISTRY,
    Ctx,
    probe_device,
    run_one,
    run_order,
    run_spec,
    start_early,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="incheck")
    parser.add_argument("--spec", required=True, help="JSON file with what the host expects")
    parser.add_argument("--out", required=True, help="JSON-lines results file")
    args = parser.parse_args(argv)
    with open(args.spec, encoding="utf-8") as fh:
        spec = json.load(fh)
    run_spec().update(spec)
    ids = list(spec.get("checks", []))
    stood_in = standin.install()  # before anything imports vllm
    device = probe_device()
    ctx = Ctx(spec=spec, device=device)
    start_early(ids, ctx)  # `vllm --version` runs beside the checks of this process
    with open(args.out, "a", encoding="utf-8") as out:

        def emit(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        emit(
            {
                "kind": "env",
                "python": sys.version.split()[0],
                "executable": sys.executable,
                "prefix": sys.prefix,
                "sys_path": sys.path,
                "device": device,
                "stand_ins": stood_in,
                "notes": [standin.note(stood_in)] if stood_in else [],
            }
        )
        for cid in run_order(ids, ctx):  # an early-started one waits for the rest
            defn = REGISTRY.get(cid)
            if defn is None:
                emit(
                    {
                        "kind": "check",
                        "id": cid,
                        "outcome": ERROR,
                        "duration_s": 0.0,
                        "detail": "unknown check id (forkpatch and incheck disagree)",
                    }
                )
                continue
            emit({"kind": "start", "id": cid})
            emit({"kind": "check", **run_one(defn, ctx)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
