#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for the operator's tests (no kubelet, no Docker).
#
#   tests/k8s/control_plane.sh build          compile kube-apiserver, kube-controller-manager and
#                                             kube-scheduler v1.20.2 into the cache (once; ~12 min on 2 cores)
#   tests/k8s/control_plane.sh start RUNDIR   start etcd + the three components, state and logs in RUNDIR
#   tests/k8s/control_plane.sh stop RUNDIR    stop what `start RUNDIR` started (by the pids it recorded)
#   tests/k8s/control_plane.sh status RUNDIR  which components run; /readyz of the API server
#   tests/k8s/control_plane.sh path           print the cache directory holding the binaries
#
# Where the binaries come from: Debian's `kubernetes` SOURCE package for bookworm (its orig tarball
# carries vendor/), compiled with Debian's Go 1.19 (package golang-go, /usr/lib/go-1.19) in GOPATH mode,
# as upstream built 1.20. etcd is Debian's etcd-server. Only Debian's package archive is used: the
# source is fetched with apt through a private sources list in the cache, /etc/apt is not changed.
#
# Cache: ${ROCKET_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocketcluster/k8s}
#   bin/        the three binaries + VERSION stamp (kept between runs)
#   gocache/    Go build cache (makes a rebuild after a cache wipe of bin/ quick)
#   build.log   the last build's full output
# Ports (loopback only; override by environment): API 26443, etcd 22379/22380, controller-manager 20257,
# scheduler 20259. After `start`, RUNDIR/kubeconfig is an admin kubeconfig (static bearer token).
set -euo pipefail

K8S_VERSION=v1.20.2
DEB_SOURCE_VERSION=1.20.5+really1.20.2-1.1+deb12u1
ORIG_TARBALL=kubernetes_1.20.5+really1.20.2.orig.tar.gz
DEB_GO=/usr/lib/go-1.19/bin/go
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)

CACHE=${ROCKET_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocketcluster/k8s}
BIN=$CACHE/bin
API_PORT=${ROCKET_K8S_API_PORT:-26443}
ETCD_PORT=${ROCKET_K8S_ETCD_PORT:-22379}
ETCD_PEER_PORT=${ROCKET_K8S_ETCD_PEER_PORT:-22380}
KCM_PORT=${ROCKET_K8S_KCM_PORT:-20257}
SCHED_PORT=${ROCKET_K8S_SCHED_PORT:-20259}
ADMIN_TOKEN=rocket-test-admin-token

log() { printf '[control-plane] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else "$@"; fi; }

apt_install() {  # install Debian packages; refresh the lists once if the first try fails
  local missing=() p
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    as_root apt-get -o DPkg::Lock::Timeout=600 update >/dev/null
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

built() {
  local c
  for c in "${COMPONENTS[@]}"; do [ -x "$BIN/$c" ] || return 1; done
  [ "$(cat "$BIN/VERSION" 2>/dev/null)" = "$K8S_VERSION" ]
}

fetch_source() {  # $1 = work dir; leaves the orig tarball in it
  local work=$1 mirror
  [ -f "$work/$ORIG_TARBALL" ] && return 0
  mirror=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}' \
    /etc/apt/sources.list 2>/dev/null)
  [ -n "$mirror" ] || die "cannot find the Debian mirror in /etc/apt (needed for apt-get source)"
  local apt=$work/apt
  mkdir -p "$apt/lists/partial" "$apt/archives/partial"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm main" >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
  log "fetching the kubernetes $DEB_SOURCE_VERSION source package"
  apt-get "${opts[@]}" update >/dev/null
  (cd "$work" && apt-get "${opts[@]}" source --download-only "kubernetes=$DEB_SOURCE_VERSION" >/dev/null)
  [ -f "$work/$ORIG_TARBALL" ] || die "apt-get source did not produce $ORIG_TARBALL"
}

build() {
  if built; then log "binaries already in $BIN"; return 0; fi
  command -v flock >/dev/null || apt_install util-linux
  mkdir -p "$CACHE"
  exec 9>"$CACHE/build.lock"
  flock 9  # one build at a time; a second caller waits and then finds the binaries
  if built; then log "binaries already in $BIN"; return 0; fi
  apt_install golang-go etcd-server openssl golang-github-modern-go-reflect2-dev ca-certificates
  [ -x "$DEB_GO" ] || die "Debian's Go is not at $DEB_GO"
  local work=$CACHE/work gopath=$CACHE/work/gopath
  mkdir -p "$work"
  fetch_source "$work"
  local src=$gopath/src/k8s.io/kubernetes
  rm -rf "$gopath" && mkdir -p "$src"
  log "unpacking the source"
  tar -xzf "$work/$ORIG_TARBALL" -C "$src" --strip-components=1
  # vendor/ pins modern-go/reflect2 1.0.1, whose unsafe map iteration breaks on Go >= 1.18;
  # Debian's golang-github-modern-go-reflect2-dev ships the fixed 1.0.2.
  local reflect2=$src/vendor/github.com/modern-go/reflect2 debreflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
  rm -f "$reflect2"/*.go "$reflect2"/*.s
  cp "$debreflect2"/*.go "$reflect2"/
  cp "$debreflect2"/*.s "$reflect2"/ 2>/dev/null || true

  export PATH=/usr/lib/go-1.19/bin:$PATH GOROOT=/usr/lib/go-1.19 GOPATH=$gopath GOCACHE=$CACHE/gocache
  export GO111MODULE=off CGO_ENABLED=0 GOFLAGS= GOTOOLCHAIN=local
  cd "$src"
  # The tarball lacks pkg/generated/openapi/zz_generated.openapi.go, which upstream's Makefile generates:
  # run the vendored openapi-gen over every package that opts in with a +k8s:openapi-gen tag.
  log "generating pkg/generated/openapi"
  go build -o "$work/openapi-gen" k8s.io/kubernetes/vendor/k8s.io/kube-openapi/cmd/openapi-gen
  local inputs tops
  tops=$(ls -d -- */ | sed 's|/$||' | grep -v -e '^vendor$' -e '^_')
  # shellcheck disable=SC2086
  inputs=$(grep -rl --include='*.go' --exclude-dir='_*' --exclude-dir='.*' -e '+k8s:openapi-gen=' $tops 2>/dev/null \
    | xargs -r grep -l '^// *+k8s:' \
    | xargs -r -n1 dirname | LC_ALL=C sort -u \
    | grep -v -e '^staging/src/k8s.io/code-generator/' -e '^staging/src/k8s.io/sample-apiserver/' \
    | sed -e 's|^staging/src/|k8s.io/kubernetes/vendor/|' -e '/^k8s.io\//!s|^|k8s.io/kubernetes/|' | paste -sd, -)
  [ -n "$inputs" ] || die "no openapi-gen input packages found"
  "$work/openapi-gen" --logtostderr --input-dirs "$inputs" \
    --output-package k8s.io/kubernetes/pkg/generated/openapi --output-file-base zz_generated.openapi \
    --go-header-file vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    --report-filename "$work/api-violations.report"
  cmp -s "$work/api-violations.report" api/api-rules/violation_exceptions.list \
    || log "warning: openapi-gen's API rule report differs from upstream's list (inputs may differ)"
  local vpkg=k8s.io/kubernetes/vendor/k8s.io
  local ldflags="-s -w -X $vpkg/component-base/version.gitVersion=$K8S_VERSION"
  ldflags+=" -X $vpkg/component-base/version.gitMajor=1 -X $vpkg/component-base/version.gitMinor=20"
  ldflags+=" -X $vpkg/component-base/version.gitTreeState=clean -X $vpkg/client-go/pkg/version.gitVersion=$K8S_VERSION"
  mkdir -p "$BIN"
  local c started
  for c in "${COMPONENTS[@]}"; do
    started=$SECONDS
    log "go build $c"
    go build -p "$(nproc)" -ldflags "$ldflags" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c"
    mv "$BIN/$c.tmp" "$BIN/$c"
    log "$c built in $((SECONDS - started)) s"
  done
  "$BIN/kube-apiserver" --version | grep -q "$K8S_VERSION" || die "kube-apiserver reports the wrong version"
  echo "$K8S_VERSION" >"$BIN/VERSION"
  cd /
  rm -rf "$gopath"  # the unpacked tree (~1 GB); the tarball and the Go cache stay for a rebuild
  log "done: $BIN"
}

api_ready() {  # $1 = run dir
  curl -fsS --max-time 2 --cacert "$1/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
    "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1
}

write_kubeconfig() {  # file user token run-dir
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rocket-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $4/pki/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: rocket-test
  context: {cluster: rocket-test, user: $2, namespace: default}
current-context: rocket-test
EOF
}

make_pki() {  # $1 = pki dir
  local p=$1
  [ -f "$p/tokens.csv" ] && return 0
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$p/ca.key" -out "$p/ca.crt" -days 3650 \
    -subj "/CN=rocket-test-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$p/apiserver.key" -out "$p/apiserver.csr" \
    -subj "/CN=kube-apiserver" 2>/dev/null
  printf '%s\n' 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc' \
    'extendedKeyUsage=serverAuth' >"$p/apiserver.ext"
  openssl x509 -req -in "$p/apiserver.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 3650 \
    -extfile "$p/apiserver.ext" -out "$p/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  {
    echo "$ADMIN_TOKEN,rocket-admin,rocket-admin,system:masters"
    echo "rocket-kcm-token,system:kube-controller-manager,rocket-kcm"
    echo "rocket-sched-token,system:kube-scheduler,rocket-sched"
  } >"$p/tokens.csv"
}

launch() {  # run-dir name argv... : start in the background, record its pid
  local run=$1 name=$2
  shift 2
  setsid "$@" >"$run/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$run/$name.pid"
}

start() {
  local run=${1:?usage: start RUNDIR}
  built || die "no Kubernetes binaries in $BIN (run: $0 build)"
  command -v etcd >/dev/null || apt_install etcd-server
  command -v openssl >/dev/null || apt_install openssl
  command -v curl >/dev/null || apt_install curl
  command -v setsid >/dev/null || apt_install util-linux
  mkdir -p "$run/logs"
  run=$(cd "$run" && pwd)
  make_pki "$run/pki"
  write_kubeconfig "$run/kubeconfig" rocket-admin "$ADMIN_TOKEN" "$run"
  write_kubeconfig "$run/kcm.kubeconfig" system:kube-controller-manager rocket-kcm-token "$run"
  write_kubeconfig "$run/sched.kubeconfig" system:kube-scheduler rocket-sched-token "$run"

  launch "$run" etcd etcd --name rocket-test --data-dir "$run/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "rocket-test=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync \
    --quota-backend-bytes 2147483648

  launch "$run" kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" --insecure-port 0 \
    --tls-cert-file "$run/pki/apiserver.crt" --tls-private-key-file "$run/pki/apiserver.key" \
    --client-ca-file "$run/pki/ca.crt" --token-auth-file "$run/pki/tokens.csv" \
    --authorization-mode Node,RBAC \
    --service-account-key-file "$run/pki/sa.pub" --service-account-signing-key-file "$run/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/24 --endpoint-reconciler-type none \
    --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,ResourceQuota \
    --allow-privileged=true --cert-dir "$run/apiserver-certs" --v 1

  local i
  for i in $(seq 240); do
    api_ready "$run" && break
    kill -0 "$(cat "$run/kube-apiserver.pid")" 2>/dev/null || { tail -n 30 "$run/logs/kube-apiserver.log" >&2; die "kube-apiserver exited"; }
    sleep 0.25
  done
  api_ready "$run" || { tail -n 30 "$run/logs/kube-apiserver.log" >&2; die "kube-apiserver not ready after 60 s"; }

  launch "$run" kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$run/kcm.kubeconfig" \
    --authentication-kubeconfig "$run/kcm.kubeconfig" --authorization-kubeconfig "$run/kcm.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --port 0 --leader-elect=false \
    --use-service-account-credentials=true --service-account-private-key-file "$run/pki/sa.key" \
    --root-ca-file "$run/pki/ca.crt" \
    --cluster-signing-cert-file "$run/pki/ca.crt" --cluster-signing-key-file "$run/pki/ca.key" \
    --service-cluster-ip-range 10.96.0.0/24 --controllers '*' \
    --cert-dir "$run/kcm-certs" --v 1

  launch "$run" kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$run/sched.kubeconfig" \
    --authentication-kubeconfig "$run/sched.kubeconfig" --authorization-kubeconfig "$run/sched.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --port 0 --leader-elect=false \
    --cert-dir "$run/sched-certs" --v 1
  log "API server ready at https://127.0.0.1:$API_PORT; KUBECONFIG=$run/kubeconfig"
}

stop() {
  local run=${1:?usage: stop RUNDIR} c pid
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [ -f "$run/$c.pid" ] || continue
    pid=$(cat "$run/$c.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$run/$c.pid"
  done
}

status() {
  local run=${1:?usage: status RUNDIR} c
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    if [ -f "$run/$c.pid" ] && kill -0 "$(cat "$run/$c.pid")" 2>/dev/null; then
      echo "$c running (pid $(cat "$run/$c.pid"))"
    else
      echo "$c not running"
    fi
  done
  if api_ready "$run"; then echo "kube-apiserver /readyz ok"; else echo "kube-apiserver /readyz failing"; fi
}

case "${1:-}" in
  build) build ;;
  start) start "${2:-}" ;;
  stop) stop "${2:-}" ;;
  status) status "${2:-}" ;;
  path) echo "$BIN" ;;
  *) echo "usage: $0 build | start RUNDIR | stop RUNDIR | status RUNDIR | path" >&2; exit 2 ;;
esac
