"""The real control plane in the loop: etcd + kube-apiserver + kube-scheduler from ``$KUBEBUILDER_ASSETS``."""
