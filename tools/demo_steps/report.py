"""What the demo is asked to do (Settings) and what it found (Summary), and writing that down."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import say


@dataclass
class Settings:
    """How big the demo is: the full demo, or the CI-sized one of the integration tests."""

    out: Path
    channels: int = 32
    size: int = 64
    bench_iterations: int = 50
    lfs_objects: int = 3


@dataclass
class Step:
    """One step's outcome: the summary table's row."""

    name: str
    ok: bool = False
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Summary:
    """Every step's outcome, the accuracy/latency table and the facts each step recorded."""

    steps: list[Step] = field(default_factory=list)
    table: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)


def write_summary(settings: Settings, summary: Summary) -> None:
    """Write summary.md and summary.json into the output folder and print the Markdown."""
    lines = ["# Demo summary", ""]
    lines += ["| step | result | seconds |", "|---|---|---|"]
    for s in summary.steps:
        first_line = s.detail.splitlines()[0][:200].replace("|", "/") if s.detail else ""
        result = "ok" if s.ok else f"FAILED: {first_line}"
        lines.append(f"| {s.name} | {result} | {s.seconds} |")
    if summary.table:
        lines += [
            "",
            "| format | runtime | max abs error vs PyTorch | median latency (ms) |",
            "|---|---|---|---|",
        ]
        for row in summary.table:
            lines.append(
                f"| {row['format']} | {row['runtime']} | "
                f"{row['max_abs_error_vs_pytorch']:.2e} | {row['median_latency_ms']:.2f} |"
            )
    for key, value in summary.facts.items():
        lines += ["", f"## {key}", "", "```", json.dumps(value, indent=2), "```"]
    text = "\n".join(lines) + "\n"
    (settings.out / "summary.md").write_text(text)
    (settings.out / "summary.json").write_text(
        json.dumps(
            {
                "ok": summary.ok,
                "steps": [asdict(s) for s in summary.steps],
                "table": summary.table,
                "facts": summary.facts,
            },
            indent=2,
        )
        + "\n"
    )
    say("\n" + text)
