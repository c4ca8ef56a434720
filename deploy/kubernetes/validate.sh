#!/usr/bin/env bash
# Validates the manifests here against the Kubernetes schemas, offline:
# deploy/kubernetes/validate.sh (CI runs it).
#
# kubernetes-validate is pinned (KUBERNETES_VALIDATE below) and installed from PyPI into a
# venv under $TENURE_TOOLS_DIR (default /var/tmp/tenure-tools, outside the clone), once; it
# carries the schemas of every Kubernetes release it knows. tenure.yaml is checked
# strictly (an unknown field is an error) against KUBERNETES_VERSION. cert-manager.yaml
# holds cert-manager's own resources, whose schemas it does not carry: it is not checked.
set -euo pipefail

KUBERNETES_VALIDATE=1.37.0
KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.33.0}"

here="$(cd "$(dirname "$0")" && pwd)"
tools="${TENURE_TOOLS_DIR:-/var/tmp/tenure-tools}"
venv="$tools/kubernetes-validate-$KUBERNETES_VALIDATE"

die() { printf 'deploy/kubernetes/validate.sh: %s\n' "$*" >&2; exit 1; }

command -v python3 >/dev/null 2>&1 ||
  die "python3 is not installed (Debian: apt-get install python3 python3-venv; .ci/run installs them)"

mkdir -p "$tools"
exec 9>"$tools/.lock-kubernetes-validate"
flock 9
if [ ! -f "$venv/.installed" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" ||
    die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
    "kubernetes-validate==$KUBERNETES_VALIDATE" ||
    die "pip could not install kubernetes-validate==$KUBERNETES_VALIDATE"
  touch "$venv/.installed"
fi
exec 9>&-

"$venv/bin/kubernetes-validate" --strict -k "$KUBERNETES_VERSION" "$here/tenure.yaml"
