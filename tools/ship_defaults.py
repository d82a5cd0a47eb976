"""Merge the entries of a tuning cache (``sparsegpu autotune`` output) into the shipped
defaults, ``sparsegpu/engine/tuning_defaults.json``, under each entry's architecture.

Entries replace shipped ones with the same key (backend, value dtype, index dtype, row
class); the others stay. Run after ``sparsegpu autotune`` on the reference GPU of an
architecture, then commit tuning_defaults.json with the autotune report it came from.

Usage: ``python3 tools/ship_defaults.py CACHE_FILE [--defaults PATH]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparsegpu.engine import _tuning_store as tuning_cache  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache_file", type=Path, help="a sparsegpu tuning cache (tuning.json)")
    parser.add_argument(
        "--defaults", type=Path, default=ROOT / "sparsegpu" / "engine" / "tuning_defaults.json"
    )
    args = parser.parse_args(argv)
    raw = json.loads(args.cache_file.read_text())
    defaults = json.loads(args.defaults.read_text())
    tuning_cache._parse_defaults(args.defaults.read_text())  # refuse to edit a broken file
    devices = defaults["devices"]
    merged = 0
    for block in raw.get("contexts", {}).values():
        context = tuning_cache.TuningContext(**block["context"])
        shipped = {
            tuning_cache.TunedEntry.from_json(e, origin="shipped").key: e
            for e in devices.get(context.arch, [])
        }
        for item in block["entries"]:
            entry = tuning_cache.TunedEntry.from_json(item)
            shipped[entry.key] = entry.to_json()
            merged += 1
        devices[context.arch] = sorted(
            shipped.values(),
            key=lambda e: (e["row_class"], e["backend"], e["value_dtype"], e["index_dtype"]),
        )
    text = json.dumps(defaults, indent=1, sort_keys=True) + "\n"
    tuning_cache._parse_defaults(text)
    args.defaults.write_text(text)
    print(f"merged {merged} entries into {args.defaults}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
