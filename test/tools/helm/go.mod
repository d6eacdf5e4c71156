// Module helm builds the Helm v3 CLI the chart's tests and the install
// walkthrough run. It is a module of its own so that mcmirror's go.mod never
// depends on Helm.
module mcmirror.test/tools/helm

go 1.26.0

require helm.sh/helm/v3 v3.22.0
