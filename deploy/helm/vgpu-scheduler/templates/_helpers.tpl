{{/*
Helpers. Rendered by Helm (deploy/render.py uses Helm's SDK; see docs/deploy.md).
*/}}

{{- define "vgpu-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "vgpu-scheduler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: include with (dict "ctx" . "component" "extender"). */}}
{{- define "vgpu-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vgpu-scheduler.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* All labels of one component's objects. */}}
{{- define "vgpu-scheduler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "vgpu-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: vgpu-scheduler
{{- end }}

{{/* Labels of our pods: selector labels, and the label that keeps them out of our own webhook. */}}
{{- define "vgpu-scheduler.podLabels" -}}
{{ include "vgpu-scheduler.selectorLabels" . }}
hami.io/webhook: ignore
{{- end }}

{{- define "vgpu-scheduler.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "vgpu-scheduler.tlsSecret" -}}
{{ include "vgpu-scheduler.fullname" . }}-tls
{{- end }}

{{- define "vgpu-scheduler.extenderService" -}}
{{ include "vgpu-scheduler.fullname" . }}-extender
{{- end }}

{{- define "vgpu-scheduler.webhookService" -}}
{{ include "vgpu-scheduler.fullname" . }}-webhook
{{- end }}

{{- define "vgpu-scheduler.webhookConfiguration" -}}
{{ include "vgpu-scheduler.fullname" . }}-webhook
{{- end }}

{{- define "vgpu-scheduler.deviceConfigMap" -}}
{{ .Values.deviceConfig.existingConfigMap | default (printf "%s-device" (include "vgpu-scheduler.fullname" .)) }}
{{- end }}

{{/*
CEL list literal of the device config's resource names (count, memory, memory percentage, cores, priority):
the resources the webhook acts on. Empty names (a resource switched off) are left out.
*/}}
{{- define "vgpu-scheduler.webhookResources" -}}
{{- $nv := .Values.deviceConfig.config.nvidia }}
{{- $names := list }}
{{- range (list $nv.resourceCountName $nv.resourceMemoryName $nv.resourceMemoryPercentageName $nv.resourceCoreName $nv.resourcePriorityName) }}
{{- if . }}{{ $names = append $names . }}{{ end }}
{{- end }}
{{- concat $names (include "vgpu-scheduler.vendorResources" . | fromJsonArray) | uniq | toJson }}
{{- end }}

{{/* The resource names of the other enabled vendors. The families HAMi initialises by default (cambricon, hygon,
amd, mthreads, biren, vastai, metax, enflame, awsneuron) always: their section's resourceCountName / resourceMemoryName /
resourceCoreName, HAMi's default name for a key left out (no section: every default). Huawei Ascend only with deviceConfig.enableAscend (HAMi's
--enable-ascend): each vnpus config's resourceName / resourceMemoryName / resourceCoreName
(huawei.com/<commonWord>[-memory|-core] when not written; no configs: HAMi's default chips); Iluvatar likewise only
with deviceConfig.enableIluvatar (HAMi's --enable-iluvatar). Enflame: resourceNameGCU, and the DRS names
(resourceNameDRSGCU, else the legacy resourceNameVGCU; resourceNameGCUMemory; resourceNameGCUCore). MetaX sGPUs:
the metax section's resourceVCountName, resourceVMemoryName, resourceVCoreName. A JSON list; a unit
test checks it against the names the services derive from the same device config and flags. Kunlunxin (on by
default): resourceCountName (whole XPUs), resourceVCountName and resourceVMemoryName (vXPUs). */}}
{{- define "vgpu-scheduler.vendorResources" -}}
{{- $cfg := .Values.deviceConfig.config | default dict }}
{{- $defaults := dict
  "cambricon" (list "cambricon.com/vmlu" "cambricon.com/mlu.smlu.vmemory" "cambricon.com/mlu.smlu.vcore")
  "hygon" (list "hygon.com/dcunum" "hygon.com/dcumem" "hygon.com/dcucores")
  "amd" (list "amd.com/gpu" "amd.com/gpumem" "amd.com/gpucores")
  "mthreads" (list "mthreads.com/vgpu" "mthreads.com/sgpu-memory" "mthreads.com/sgpu-core") }}
{{- $names := list }}
{{- range $section := list "cambricon" "hygon" "amd" "mthreads" }}
{{- $s := index $cfg $section | default dict }}
{{- range $i, $key := list "resourceCountName" "resourceMemoryName" "resourceCoreName" }}
{{- $names = append $names ((kindIs "map" $s) | ternary (index $s $key) "" | default (index (index $defaults $section) $i)) }}
{{- end }}
{{- end }}
{{- if .Values.deviceConfig.enableAscend }}
{{- $vnpus := index $cfg "vnpus" | default dict }}
{{- $chips := list }}
{{- if kindIs "slice" $vnpus }}{{ $chips = $vnpus }}{{ else if kindIs "map" $vnpus }}{{ $chips = $vnpus.configs | default list }}{{ end }}
{{- if not $chips }}
{{- range $cw := list "Ascend910A" "Ascend910B2" "Ascend910B3" "Ascend910B4-1" "Ascend910B4" "Ascend310P" "Ascend910C" }}
{{- $chips = append $chips (dict "commonWord" $cw) }}
{{- end }}
{{- end }}
{{- range $chip := $chips }}
{{- $base := printf "huawei.com/%s" $chip.commonWord }}
{{- $names = append $names ($chip.resourceName | default $base) }}
{{- $names = append $names ($chip.resourceMemoryName | default (printf "%s-memory" $base)) }}
{{- $names = append $names ($chip.resourceCoreName | default (printf "%s-core" $base)) }}
{{- end }}
{{- end }}
{{- $countOnly := dict "biren" "birentech.com/gpu" "vastai" "vastaitech.com/va" }}
{{- $_ := set $countOnly "metax" "metax-tech.com/gpu" }}
{{- range $section, $default := $countOnly }}
{{- $s := index $cfg $section | default dict }}
{{- $names = append $names ((kindIs "map" $s) | ternary (index $s "resourceCountName") "" | default $default) }}
{{- end }}
{{- if .Values.deviceConfig.enableIluvatar }}
{{- $ilu := index $cfg "iluvatars" | default list }}
{{- $chips := list }}
{{- if and (kindIs "slice" $ilu) $ilu }}{{ $chips = $ilu }}{{ else }}
{{- range $cw := list "MR-V100" "MR-V50" "BI-V150" "BI-V100" }}
{{- $chips = append $chips (dict "commonWord" $cw) }}
{{- end }}
{{- end }}
{{- range $chip := $chips }}
{{- $base := printf "iluvatar.ai/%s" $chip.commonWord }}
{{- $names = append $names ($chip.resourceCountName | default (printf "%s-vgpu" $base)) }}
{{- $names = append $names ($chip.resourceMemoryName | default (printf "%s.vMem" $base)) }}
{{- $names = append $names ($chip.resourceCoreName | default (printf "%s.vCore" $base)) }}
{{- end }}
{{- end }}
{{- $enf := index $cfg "enflame" | default dict }}
{{- if not (kindIs "map" $enf) }}{{ $enf = dict }}{{ end }}
{{- $names = append $names ($enf.resourceNameGCU | default "enflame.com/gcu") }}
{{- $names = append $names (trim ($enf.resourceNameDRSGCU | default "") | default (trim ($enf.resourceNameVGCU | default "")) | default "enflame.com/drs-gcu") }}
{{- $names = append $names (trim ($enf.resourceNameGCUMemory | default "") | default "enflame.com/gcu-memory") }}
{{- $names = append $names (trim ($enf.resourceNameGCUCore | default "") | default "enflame.com/gcu-core") }}
{{- $mx := index $cfg "metax" | default dict }}
{{- if not (kindIs "map" $mx) }}{{ $mx = dict }}{{ end }}
{{- $names = append $names ($mx.resourceVCountName | default "metax-tech.com/sgpu") }}
{{- $names = append $names ($mx.resourceVMemoryName | default "metax-tech.com/vmemory") }}
{{- $names = append $names ($mx.resourceVCoreName | default "metax-tech.com/vcore") }}
{{- $aws := index $cfg "awsneuron" | default dict }}
{{- if not (kindIs "map" $aws) }}{{ $aws = dict }}{{ end }}
{{- $names = append $names ($aws.resourceCountName | default "aws.amazon.com/neuron") }}
{{- $names = append $names ($aws.resourceCoreName | default "aws.amazon.com/neuroncore") }}

{{- $kl := index $cfg "kunlun" | default dict }}
{{- if not (kindIs "map" $kl) }}{{ $kl = dict }}{{ end }}
{{- $names = append $names ($kl.resourceCountName | default "kunlunxin.com/xpu") }}
{{- $names = append $names ($kl.resourceVCountName | default "kunlunxin.com/vxpu") }}
{{- $names = append $names ($kl.resourceVMemoryName | default "kunlunxin.com/vxpu-memory") }}
{{- $names | uniq | toJson }}
{{- end }}

{{- define "vgpu-scheduler.leaseName" -}}
{{ .Values.kubeScheduler.leaseName | default (include "vgpu-scheduler.fullname" .) }}
{{- end }}

{{/* DNS names of the serving certificate: the extender and webhook Services. */}}
{{- define "vgpu-scheduler.tlsHosts" -}}
{{- $ns := .Release.Namespace }}
{{- $ext := include "vgpu-scheduler.extenderService" . }}
{{- $hook := include "vgpu-scheduler.webhookService" . }}
{{- printf "%s,%s.%s,%s.%s.svc,%s,%s.%s,%s.%s.svc" $ext $ext $ns $ext $ns $hook $hook $ns $hook $ns }}
{{- end }}

{{/* The bundled Redis-with-Sentinel: the headless Service that names each pod, and the URL listing every
Sentinel (redis+sentinel://host:port,.../masterName/0). */}}
{{- define "vgpu-scheduler.redisHeadless" -}}
{{- printf "%s-redis-headless.%s.svc" (include "vgpu-scheduler.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "vgpu-scheduler.sentinelUrl" -}}
{{- $hosts := list }}
{{- range $i := until (int .Values.redis.sentinel.replicas) }}
{{- $hosts = append $hosts (printf "%s-redis-%d.%s:%d" (include "vgpu-scheduler.fullname" $) $i (include "vgpu-scheduler.redisHeadless" $) (int $.Values.redis.sentinel.port)) }}
{{- end }}
{{- printf "redis+sentinel://%s/%s/0" (join "," $hosts) .Values.redis.sentinel.masterName }}
{{- end }}

{{/* --redis-wait-replicas / --redis-wait-timeout, when set (environment list items). */}}
{{- define "vgpu-scheduler.redisWaitEnv" -}}
{{- if ne (toString .Values.redis.waitReplicas) "" }}
- name: VGPU_REDIS_WAIT_REPLICAS
  value: {{ toString .Values.redis.waitReplicas | quote }}
{{- end }}
{{- if ne (toString .Values.redis.waitTimeout) "" }}
- name: VGPU_REDIS_WAIT_TIMEOUT
  value: {{ toString .Values.redis.waitTimeout | quote }}
{{- end }}
{{- end }}

{{/* The Redis URL, as the VGPU_REDIS_URL environment variable (a list item). */}}
{{- define "vgpu-scheduler.redisEnv" -}}
- name: VGPU_REDIS_URL
{{- if and .Values.redis.enabled .Values.redis.sentinel.enabled }}
  value: {{ include "vgpu-scheduler.sentinelUrl" . | quote }}
{{- else if .Values.redis.enabled }}
  value: {{ printf "redis://%s-redis.%s.svc:%d/0" (include "vgpu-scheduler.fullname" .) .Release.Namespace (int .Values.redis.port) | quote }}
{{- else if .Values.redis.external.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.external.existingSecret }}
      key: {{ .Values.redis.external.existingSecretKey }}
{{- else }}
  value: {{ required "redis.external.url or redis.external.existingSecret is required when redis.enabled is false" .Values.redis.external.url | quote }}
{{- end }}
{{- end }}

{{/* The Secret holding kube-scheduler's extender client certificate (tls.crt, tls.key) and the client CA (ca.crt). */}}
{{- define "vgpu-scheduler.schedulerClientSecret" -}}
{{ .Values.schedulerAuth.existingSecret | default (printf "%s-scheduler-client" (include "vgpu-scheduler.fullname" .)) }}
{{- end }}

{{/* The Secret holding the Redis password; fails for an external Redis with auth but no Secret named. */}}
{{- define "vgpu-scheduler.redisAuthSecret" -}}
{{- if .Values.redis.auth.existingSecret }}
{{- .Values.redis.auth.existingSecret }}
{{- else if .Values.redis.enabled }}
{{- printf "%s-redis-auth" (include "vgpu-scheduler.fullname" .) }}
{{- else }}
{{- fail "redis.auth.existingSecret is required for an external Redis with redis.auth.enabled (or set redis.auth.enabled=false when the URL carries the credentials)" }}
{{- end }}
{{- end }}

{{/* Flags every vgpu-scheduler service takes (list items). */}}
{{- define "vgpu-scheduler.commonArgs" -}}
- --metrics-bind-address=:{{ .Values.metricsPort }}
- --device-config-file=/device-config.yaml
{{- if .Values.deviceConfig.enableAscend }}
- --enable-ascend
{{- end }}
{{- if .Values.deviceConfig.enableIluvatar }}
- --enable-iluvatar
{{- end }}
- --key-prefix={{ .Values.keyPrefix }}
- --log-format={{ .Values.log.format }}
- --log-level={{ .Values.log.level }}
{{- if .Values.redis.auth.enabled }}
- --redis-password-file=/etc/vgpu-scheduler/redis/password
{{- end }}
{{- end }}

{{/* Pod-level settings shared by our Deployments. */}}
{{- define "vgpu-scheduler.podSpecCommon" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Volumes every vgpu-scheduler service mounts: the device config and a scratch /tmp. */}}
{{- define "vgpu-scheduler.commonVolumes" -}}
- name: device-config
  configMap:
    name: {{ include "vgpu-scheduler.deviceConfigMap" . }}
- name: tmp
  emptyDir: {}
{{- if .Values.redis.auth.enabled }}
- name: redis-auth
  secret:
    secretName: {{ include "vgpu-scheduler.redisAuthSecret" . }}
    items:
      - key: {{ .Values.redis.auth.existingSecretPasswordKey }}
        path: password
{{- end }}
{{- end }}

{{/* Mounts matching commonVolumes. The Redis password is a whole-directory mount (no subPath) so that a
rotated Secret reaches the running pods; --redis-password-file is read for every new connection. */}}
{{- define "vgpu-scheduler.commonVolumeMounts" -}}
- name: device-config
  mountPath: /device-config.yaml
  subPath: device-config.yaml
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.redis.auth.enabled }}
- name: redis-auth
  mountPath: /etc/vgpu-scheduler/redis
  readOnly: true
{{- end }}
{{- end }}

{{/* Environment of every vgpu-scheduler service. */}}
{{- define "vgpu-scheduler.commonEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{ include "vgpu-scheduler.redisEnv" . }}
{{- include "vgpu-scheduler.redisWaitEnv" . }}
{{- end }}

{{/*
The TLS secret as a volume source, with the same file names whichever tool made it:
tls.crt, tls.key, ca.crt (kube-webhook-certgen writes the keys cert, key and ca).
*/}}
{{- define "vgpu-scheduler.tlsVolume" -}}
secret:
  secretName: {{ include "vgpu-scheduler.tlsSecret" . }}
  {{- if not .Values.tls.certManager.enabled }}
  items:
    - key: cert
      path: tls.crt
    - key: key
      path: tls.key
    - key: ca
      path: ca.crt
  {{- end }}
{{- end }}

{{/* Only the CA of the TLS secret, for kube-scheduler to verify the extender. */}}
{{- define "vgpu-scheduler.tlsCAVolume" -}}
secret:
  secretName: {{ include "vgpu-scheduler.tlsSecret" . }}
  items:
    - key: {{ ternary "ca.crt" "ca" .Values.tls.certManager.enabled }}
      path: ca.crt
{{- end }}
