#!/usr/bin/env bash
# Create the credentials the plain manifests (deploy/manifests/) expect, if they do not exist yet:
#   vgpu-scheduler-redis-auth        the Redis password (key: password)
#   vgpu-scheduler-scheduler-client  kube-scheduler's client certificate for /filter and /bind (tls.crt, tls.key)
#                                    and the CA the extender trusts (ca.crt)
# Needs kubectl (pointed at the cluster) and openssl. Usage: deploy/create-secrets.sh [namespace]
# The Helm chart makes the same Secrets itself; this is only for the plain manifests. docs/deploy.md, "Security".
set -euo pipefail
NS="${1:-vgpu-system}"
DAYS="${VGPU_CERT_DAYS:-3650}"

exists() { kubectl -n "$NS" get secret "$1" >/dev/null 2>&1; }

kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS"

if exists vgpu-scheduler-redis-auth; then
  echo "secret/vgpu-scheduler-redis-auth exists: kept"
else
  kubectl -n "$NS" create secret generic vgpu-scheduler-redis-auth \
    --from-literal=password="$(openssl rand -hex 24)"
fi

if exists vgpu-scheduler-scheduler-client; then
  echo "secret/vgpu-scheduler-scheduler-client exists: kept"
else
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' EXIT
  openssl req -x509 -newkey rsa:2048 -nodes -days "$DAYS" -subj "/CN=vgpu-scheduler-scheduler-client-ca" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
    > "$dir/client.ext"
  openssl req -new -newkey rsa:2048 -nodes -subj "/CN=vgpu-scheduler-kube-scheduler" \
    -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
  openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days "$DAYS" \
    -extfile "$dir/client.ext" -out "$dir/tls.crt" 2>/dev/null
  # The CA's key is not kept: rotating means running this again after deleting the Secret.
  kubectl -n "$NS" create secret generic vgpu-scheduler-scheduler-client --type=kubernetes.io/tls \
    --from-file=tls.crt="$dir/tls.crt" --from-file=tls.key="$dir/tls.key" --from-file=ca.crt="$dir/ca.crt"
fi
