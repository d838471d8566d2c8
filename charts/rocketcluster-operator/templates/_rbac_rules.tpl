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
# Listeners of type nodeport: the addresses of the nodes hosting the pods (read-only).
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
{{- if .Values.drainWebhook.enabled }}
# Node drains: kopf keeps the operator's pods/eviction ValidatingWebhookConfiguration (cluster-scoped)
# pointing at its webhook server with the CA it made (kopf also lists the mutating kind).
- apiGroups: ["admissionregistration.k8s.io"]
  resources: ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"]
  verbs: ["get", "list", "watch", "create", "patch"]
{{- end }}
{{- if .Values.operator.peering }}
# kopf peering between replicas (cluster-wide peering object).
- apiGroups: ["kopf.dev"]
  resources: ["clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}

{{- define "rocketcluster-operator.namespacedRules" -}}
# The custom resource (kopf patches finalizers and progress annotations), its status, and
# finalizers (owner references with blockOwnerDeletion on the children).
- apiGroups: ["rocket.dev"]
  resources: ["rocketclusters"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["rocket.dev"]
  resources: ["rocketclusters/status"]
  verbs: ["get", "patch"]
- apiGroups: ["rocket.dev"]
  resources: ["rocketclusters/finalizers"]
  verbs: ["update"]
# RocketUsers (kopf: finalizer, progress annotations), their status and finalizers.
- apiGroups: ["rocket.dev"]
  resources: ["rocketusers"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["rocket.dev"]
  resources: ["rocketusers/status"]
  verbs: ["get", "patch"]
- apiGroups: ["rocket.dev"]
  resources: ["rocketusers/finalizers"]
  verbs: ["update"]
# spec.security and RocketUsers: the admin credentials, cluster CA, TLS and user Secrets, read and
# written by name only (never listed or watched).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch"]
# spec.security.networkPolicies.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Children applied server-side: NameServer Deployment, Services, broker ConfigMap, PDBs.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
# The Services of a listener removed from spec.listeners.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["delete"]
# ConfigMaps: the NameServer ConfigMap is deleted when ACL and TLS are turned off.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Broker StatefulSets: applied, and deleted when a slave tier or a drained group goes.
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Pods: observe readiness; delete one at a time for rolling restarts.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "delete"]
# Broker PVCs: observe; set or drop the cluster's owner reference (deleteClaim); remove those of a
# drained broker group on scale-in.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "patch", "delete"]
# failover: Controller: the controllers' Raft secret, created once (read to see whether it exists;
# never listed or watched); with failover: Manual the controllers' objects are deleted.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["delete"]
# Analytics jobs: the Spark operator's SparkApplications / ScheduledSparkApplications (applied,
# watched for their status, deleted when a job leaves spec.analytics). Harmless where the Spark
# operator is not installed.
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications", "scheduledsparkapplications"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events the operator posts on its resources (kopf's event poster).
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.operator.peering }}
# kopf peering between replicas (namespaced peering objects).
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}
