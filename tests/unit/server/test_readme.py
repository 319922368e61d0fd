"""README stays true: its table of API versions is the one the broker advertises."""

from __future__ import annotations

import re
from pathlib import Path

from kio.index import api_key_map

from tiercel.server.kafka_apis import api_table

README = Path(__file__).resolve().parents[3] / "README.md"


def _readme_rows() -> dict[int, str]:
    rows = {}
    for line in README.read_text().splitlines():
        match = re.fullmatch(r"\| (\w+) \| (\d+) \| ([^|]+) \|", line)
        if match:
            rows[int(match.group(2))] = f"{match.group(1)} {match.group(3).strip()}"
    return rows


def test_readme_lists_exactly_the_supported_api_versions() -> None:
    expected = {}
    for key, spec in api_table().items():
        name = "".join(word.capitalize() for word in api_key_map[key].split("_"))
        versions = (
            f"{spec.min_version}\u2013{spec.max_version}"  # an en dash, as in README
            if spec.min_version != spec.max_version
            else f"{spec.min_version}"
        )
        if spec.advertised_min_version != spec.min_version:
            versions += f" (advertised from {spec.advertised_min_version})"
        expected[key] = f"{name} {versions}"
    assert _readme_rows() == expected
