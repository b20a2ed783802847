"""Checks the properties of every ctest test (tests/CMakeLists.txt):
- a TIMEOUT of at most an hour: a hang then fails that test fast instead of running CI into its limit;
- the unit, MPI, restricted-ISA and end-to-end tests get test_env, OMP_NUM_THREADS included: their floating-point
  results (how ATen and loom split reductions over threads) must not depend on the machine's core count;
- the discovered unit tests are exactly the binary's test cases, one entry each: Catch2's ctest discovery cuts a
  name at ';' into entries that match no case (tests/unit/main.cpp also makes such an entry fail when it runs).

    python3 tests/ctest_properties.py BUILD_DIR
"""
import json
import subprocess
import sys

MAX_TIMEOUT_S = 3600
NEEDS_ENV = ("unit:", "mpi:", "isa:", "e2e:")
UNIT_PREFIX = "unit:"  # tests/CMakeLists.txt: catch_discover_tests' TEST_PREFIX "unit: " (its space is dropped)


def problems(test):
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    timeout = props.get("TIMEOUT")
    if timeout is None or not 0 < float(timeout) <= MAX_TIMEOUT_S:
        yield f"TIMEOUT {timeout} (want one in (0, {MAX_TIMEOUT_S}] s)"
    env = props.get("ENVIRONMENT", [])
    env = [env] if isinstance(env, str) else env
    if test["name"].startswith(NEEDS_ENV) and not any(v.startswith("OMP_NUM_THREADS=") for v in env):
        yield f"no OMP_NUM_THREADS in ENVIRONMENT {env}"


def unit_test_problems(tests):
    """The "unit:NAME" entries against the test cases the binary lists."""
    units = [t for t in tests if t["name"].startswith(UNIT_PREFIX)]
    if not units:
        return [f"no '{UNIT_PREFIX}' tests discovered"]
    binary = units[0]["command"][0]
    cases = subprocess.run([binary, "--list-test-names-only"], capture_output=True, text=True).stdout.splitlines()
    cases = [c for c in cases if c]
    discovered = [t["name"][len(UNIT_PREFIX):] for t in units]
    bad = [f"{UNIT_PREFIX}{n}: not a test case of {binary} (a name with ';' is cut in two by catch_discover_tests)"
           for n in discovered if n not in cases]
    bad += [f"test case '{c}' has no '{UNIT_PREFIX}' entry" for c in cases if c not in discovered]
    bad += [f"test case '{c}' has {discovered.count(c)} entries" for c in set(discovered) if discovered.count(c) > 1]
    return bad


def main():
    listing = subprocess.run(["ctest", "--test-dir", sys.argv[1], "--show-only=json-v1"], check=True,
                             capture_output=True, text=True).stdout
    tests = json.loads(listing)["tests"]
    bad = [f"{t['name']}: {p}" for t in tests for p in problems(t)] + unit_test_problems(tests)
    if not tests or bad:
        print(f"{len(bad)} problems in the properties of {len(tests)} ctest tests (tests/CMakeLists.txt):",
              *bad[:50], sep="\n  ")
        return 1
    print(f"all {len(tests)} ctest tests have a TIMEOUT of at most {MAX_TIMEOUT_S} s and their environment; "
          f"the '{UNIT_PREFIX}' entries are the unit binary's test cases, one each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
