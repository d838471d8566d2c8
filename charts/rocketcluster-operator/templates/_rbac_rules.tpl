{{/*
Least privilege for the operator, derived from what operator/rocket_operator reads and writes.
clusterRules: cluster-scoped reads kopf needs to discover resources and namespaces.
namespacedRules: the RocketCluster resources and every child kind the operator manages.
*/}}
{{- define "rocketcluster-operator.clusterRules" -}}
# kopf: notice CRDs and namespaces appearing (discovery only, read-only).
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{- define "rocketcluster-operator.namespacedRules" -}}
# The custom resource, its status and finalizers.
- apiGroups: ["rocket.dev"]
  resources: ["rocketclusters"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["rocket.dev"]
  resources: ["rocketclusters/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["rocket.dev"]
  resources: ["rocketclusters/finalizers"]
  verbs: ["update"]
# Children: NameServer Deployment, broker StatefulSets, Services, ConfigMaps, PDBs.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Pods: observe readiness; delete one at a time for rolling restarts.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "delete"]
# Broker PVCs: observe, and remove those of a drained broker group on scale-in.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "delete"]
# Events the operator posts on its resources (kopf's event poster).
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Log analytics jobs (kubeflow spark-operator CRDs, when installed).
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications", "scheduledsparkapplications"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
{{- end }}
