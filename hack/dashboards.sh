#!/usr/bin/env bash
# Regenerate the Grafana dashboards in config/grafana with kubebuilder's Grafana plugin.
#
# The plugin writes grafana/ at a project's root and records itself in PROJECT; the tree keeps
# dashboards under config/ (README, Layout). So it runs on a scratch copy of PROJECT and of
# config/grafana/custom-metrics/config.yaml (the operator's own metrics, one panel each), and its
# output is copied back: controller-runtime-metrics.json, controller-resources-metrics.json and
# custom-metrics/custom-metrics-dashboard.json. `make verify` fails when they are out of date.
#
# Usage: hack/dashboards.sh    (KUBEBUILDER: the kubebuilder binary, default bin/kubebuilder)
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

root="${LOCKEDJOB_ROOT}"
kubebuilder="${KUBEBUILDER:-${root}/bin/kubebuilder}"
[[ -x "${kubebuilder}" ]] || die "kubebuilder not found at ${kubebuilder}: run 'make kubebuilder'"

scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
cp "${root}/PROJECT" "${scratch}/PROJECT"
mkdir -p "${scratch}/grafana/custom-metrics"
cp "${root}/config/grafana/custom-metrics/config.yaml" "${scratch}/grafana/custom-metrics/config.yaml"
(cd "${scratch}" && "${kubebuilder}" edit --plugins grafana.kubebuilder.io/v1-alpha >/dev/null)

out="${root}/config/grafana"
cp "${scratch}/grafana/controller-runtime-metrics.json" "${scratch}/grafana/controller-resources-metrics.json" "${out}/"
cp "${scratch}/grafana/custom-metrics/custom-metrics-dashboard.json" "${out}/custom-metrics/"
echo "dashboards written to ${out}"
