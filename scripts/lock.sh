#!/usr/bin/env bash
# Re-resolve requirements.lock from pyproject.toml (with the dev extra and the pinned torch), without
# installing anything: `make lock`. Commit the result; `make setup` installs exactly it, so that two
# machines score the same model with the same numpy, scipy and onnxruntime.
set -euo pipefail
venv=${1:-.venv}
report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$venv/bin/pip" install -q --dry-run --ignore-installed --report "$report" \
    torch==2.14.1 torchvision==0.29.1 -e '.[dev]' >/dev/null
"$venv/bin/python" - "$report" > requirements.lock.tmp <<'PY'
import json, sys
# pip and setuptools are the installer's own; argparse is the standard library's (an old backport
# some distribution still names).
skip = {"segfactory", "pip", "setuptools", "argparse"}
rows = sorted({(i["metadata"]["name"].lower().replace("_", "-"), i["metadata"]["version"])
               for i in json.load(open(sys.argv[1]))["install"]})
print("# Exact versions `make setup` installs (torch's pair first, then this file, then the package).")
print("# Regenerate with `make lock` after changing pyproject.toml; never edit by hand.")
for name, version in rows:
    if name not in skip:
        print(f"{name}=={version}")
PY
mv requirements.lock.tmp requirements.lock
echo "requirements.lock: $(grep -c '==' requirements.lock) pinned distributions"
