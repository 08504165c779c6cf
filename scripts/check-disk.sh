#!/usr/bin/env bash
# Fail early, with one clear line, when the disk cannot hold the virtual environment.
# The pinned torch wheel is a CUDA build of about 5.6 GB installed; pip also unpacks it under
# $TMPDIR. Running out half-way leaves a broken .venv and a pip traceback instead.
#   usage: check-disk.sh VENV_DIR [NEED_GB]
# NEED_GB defaults to 8 when torch is not yet installed in VENV_DIR, and to 1 when it is.
# SEGFACTORY_SKIP_DISK_CHECK=1 skips the check.
set -uo pipefail

venv=${1:?usage: check-disk.sh VENV_DIR [NEED_GB]}
[[ ${SEGFACTORY_SKIP_DISK_CHECK:-0} == 1 ]] && exit 0

if [[ -n ${2:-} ]]; then
    need_gb=$2
elif compgen -G "$venv/lib/python*/site-packages/torch" >/dev/null; then
    need_gb=1
else
    need_gb=8
fi

fail=0
seen=""  # filesystems already checked: the venv and $TMPDIR usually share one, and it is said once
for dir in "$(dirname "$(realpath -m "$venv")")" "${TMPDIR:-/tmp}"; do
    read -r fs free_kb < <(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 {print $1, $4}')
    [[ -z ${free_kb:-} || " $seen " == *" $fs "* ]] && continue
    seen+=" $fs"
    if ((free_kb < need_gb * 1024 * 1024)); then
        echo "setup: $dir has $((free_kb / 1024)) MB free; installing $venv needs about ${need_gb} GB" \
             "(free space, or set SEGFACTORY_SKIP_DISK_CHECK=1 to try anyway)" >&2
        fail=1
    fi
done
exit $fail
