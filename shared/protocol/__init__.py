"""Pure wire shapes of the extender: kube-scheduler extender v1, AdmissionReview, the webhook decision,
JSON Patch and pod event texts. No I/O; see docs/protocol.md."""
