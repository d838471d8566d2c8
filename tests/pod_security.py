"""The Kubernetes Pod Security Standards' "restricted" profile, checked field by field on a pod spec.

Every control of https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the
baseline controls, which restricted includes, then the restricted ones), as the Pod Security
admission of Kubernetes 1.25+ ("latest") evaluates them, plus this project's own rule that root
filesystems are read-only. :func:`violations` returns one line per failed control; empty = passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Baseline "Capabilities": what may be added at all.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
#: Baseline "Sysctls": the safe set.
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
#: Baseline "SELinux": allowed types.
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
#: Restricted "Volume Types".
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    out = []
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for c in pod.get(field) or []:
            out.append((f"{field}[{c.get('name')}]", c))
    return out


def _pod_level(pod: Mapping[str, Any], annotations: Mapping[str, str] | None) -> list[str]:
    """Baseline controls of the pod itself: host namespaces, volumes, AppArmor, sysctls."""
    bad: list[str] = []
    psc = pod.get("securityContext") or {}
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        bad.append("HostProcess: spec.securityContext.windowsOptions.hostProcess")
    bad += [f"Host Namespaces: spec.{f}" for f in ("hostNetwork", "hostPID", "hostIPC") if pod.get(f)]
    for vol in pod.get("volumes") or []:
        if "hostPath" in vol:
            bad.append(f"HostPath Volumes: {vol.get('name')}")
        kinds = set(vol) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            bad.append(f"Volume Types: {vol.get('name')} is {sorted(kinds - RESTRICTED_VOLUMES)}")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value in ("runtime/default", "") or value.startswith("localhost/")):
            bad.append(f"AppArmor: {key}={value}")
    bad += [f"Sysctls: {s.get('name')}" for s in psc.get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return bad


def _context_level(where: str, ctx: Mapping[str, Any]) -> list[str]:
    """Controls every security context (the pod's and each container's) must pass."""
    bad: list[str] = []
    se = ctx.get("seLinuxOptions") or {}
    if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
        bad.append(f"SELinux: {where}.seLinuxOptions")
    if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        bad.append(f"Seccomp: {where} Unconfined")
    if ctx.get("runAsUser") == 0:
        bad.append(f"Running as Non-root user: {where}.runAsUser 0")
    return bad


def _container_level(where: str, c: Mapping[str, Any], psc: Mapping[str, Any], read_only_root: bool) -> list[str]:
    """Baseline and restricted controls of one container (``psc``: the pod's security context)."""
    bad: list[str] = []
    sc = c.get("securityContext") or {}
    if (sc.get("windowsOptions") or {}).get("hostProcess"):
        bad.append(f"HostProcess: {where}")
    if sc.get("privileged"):
        bad.append(f"Privileged Containers: {where}")
    caps = sc.get("capabilities") or {}
    added = set(caps.get("add") or [])
    if not added <= BASELINE_CAPABILITIES:
        bad.append(f"Capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}")
    bad += [f"Host Ports: {where} {p.get('hostPort')}" for p in c.get("ports") or [] if p.get("hostPort")]
    if sc.get("procMount") not in (None, "Default"):
        bad.append(f"/proc Mount Type: {where}")
    # -- restricted
    if sc.get("allowPrivilegeEscalation") is not False:
        bad.append(f"Privilege Escalation: {where}.securityContext.allowPrivilegeEscalation is not false")
    non_root = sc.get("runAsNonRoot")
    if non_root is False or (non_root is None and psc.get("runAsNonRoot") is not True):
        bad.append(f"Running as Non-root: {where} may run as root")
    seccomp = (sc.get("seccompProfile") or {}).get("type") or (psc.get("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        bad.append(f"Seccomp: {where} has no RuntimeDefault or Localhost profile")
    if "ALL" not in (caps.get("drop") or []):
        bad.append(f"Capabilities: {where} does not drop ALL")
    if not added <= {"NET_BIND_SERVICE"}:
        bad.append(f"Capabilities: {where} adds {sorted(added - {'NET_BIND_SERVICE'})}")
    if read_only_root and where.startswith("containers") and sc.get("readOnlyRootFilesystem") is not True:
        bad.append(f"readOnlyRootFilesystem: {where} has a writable root filesystem")
    return bad


def violations(pod: Mapping[str, Any], annotations: Mapping[str, str] | None = None, *,
               read_only_root: bool = True) -> list[str]:
    """What in ``pod`` (a core/v1 PodSpec as a dict) the restricted profile refuses; with
    ``read_only_root`` also containers whose root filesystem is writable."""
    psc = pod.get("securityContext") or {}
    bad = _pod_level(pod, annotations) + _context_level("spec.securityContext", psc)
    for where, c in _containers(pod):
        bad += _context_level(where, c.get("securityContext") or {})
        bad += _container_level(where, c, psc, read_only_root)
    return bad


def workload_pods(objects: list[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any], Mapping[str, str]]]:
    """``(kind/name, pod spec, pod annotations)`` of every Deployment, StatefulSet, DaemonSet, Job, CronJob
    and Pod among ``objects``."""
    out = []
    for obj in objects:
        kind, name = obj.get("kind"), obj["metadata"]["name"]
        if kind == "Pod":
            out.append((f"Pod/{name}", obj["spec"], obj["metadata"].get("annotations") or {}))
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            tpl = obj["spec"]["template"]
            out.append((f"{kind}/{name}", tpl["spec"], (tpl.get("metadata") or {}).get("annotations") or {}))
        elif kind == "CronJob":
            tpl = obj["spec"]["jobTemplate"]["spec"]["template"]
            out.append((f"{kind}/{name}", tpl["spec"], (tpl.get("metadata") or {}).get("annotations") or {}))
    return out
