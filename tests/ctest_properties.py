"""Checks the properties of every ctest test (tests/CMakeLists.txt):
- a TIMEOUT of at most an hour: a hang then fails that test fast instead of running CI into its limit;
- the unit, MPI, restricted-ISA and end-to-end tests get test_env, OMP_NUM_THREADS included: their floating-point
  results (how ATen and loom split reductions over threads) must not depend on the machine's core count.

    python3 tests/ctest_properties.py BUILD_DIR
"""
import json
import subprocess
import sys

MAX_TIMEOUT_S = 3600
NEEDS_ENV = ("unit:", "mpi:", "isa:", "e2e:")


def problems(test):
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    timeout = props.get("TIMEOUT")
    if timeout is None or not 0 < float(timeout) <= MAX_TIMEOUT_S:
        yield f"TIMEOUT {timeout} (want one in (0, {MAX_TIMEOUT_S}] s)"
    env = props.get("ENVIRONMENT", [])
    env = [env] if isinstance(env, str) else env
    if test["name"].startswith(NEEDS_ENV) and not any(v.startswith("OMP_NUM_THREADS=") for v in env):
        yield f"no OMP_NUM_THREADS in ENVIRONMENT {env}"


def main():
    listing = subprocess.run(["ctest", "--test-dir", sys.argv[1], "--show-only=json-v1"], check=True,
                             capture_output=True, text=True).stdout
    tests = json.loads(listing)["tests"]
    bad = [f"{t['name']}: {p}" for t in tests for p in problems(t)]
    if not tests or bad:
        print(f"{len(bad)} problems in the properties of {len(tests)} ctest tests (tests/CMakeLists.txt):",
              *bad[:50], sep="\n  ")
        return 1
    print(f"all {len(tests)} ctest tests have a TIMEOUT of at most {MAX_TIMEOUT_S} s and their environment")
    return 0


if __name__ == "__main__":
    sys.exit(main())
