// Module pause builds the pod sandbox process of the real-node e2e tests'
// registry.k8s.io/pause:3.10, which test/tools/image.sh builds locally.
module mcmirror.test/tools/images/pause

go 1.26
