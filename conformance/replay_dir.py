"""Replay every kvsim_*.json in a directory through vLLM 0.33.0 in one process,
writing the reference observations beside each trace as *.obs.jsonl."""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_replay  # noqa: E402


def main() -> None:
    paths = sorted(glob.glob(os.path.join(sys.argv[1], "kvsim_*.json")))
    for path in paths:
        with open(path) as f:
            trace = json.load(f)
        lines = vllm_replay.replay_lines(trace)
        with open(path[: -len(".json")] + ".obs.jsonl", "w") as f:
            f.write("\n".join(lines) + "\n")
    print(f"replayed {len(paths)} traces through vLLM", file=sys.stderr)


if __name__ == "__main__":
    main()
