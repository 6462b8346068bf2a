{{/* Labels Helm users expect, on top of pav's own (object metadata only:
selectors and pod templates stay those of `pav manifests`). */}}
{{- define "pav.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The pav image: [registry/]repository:tag, tag defaulting to appVersion.
image.repository has no default: no registry publishes pav, so any default
would name an image the nodes cannot pull and the first install would end
in ImagePullBackOff. Rendering fails instead, saying what to build and set. */}}
{{- define "pav.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- $repository := required (printf `image.repository is required: no registry publishes the pav image, so build it, push it to a registry your nodes pull from and set --set image.repository=REGISTRY/pav (image.tag defaults to %s). Build it with the repository's Dockerfile (docker build -t REGISTRY/pav:%s . && docker push REGISTRY/pav:%s) or, for the local test cluster, with scripts/e2e-image; docs/install.md, "Building and publishing the image"` $tag $tag $tag) .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}{{ end -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end }}

{{/* Names of the pull secrets, comma-separated ({name: x} or plain names). */}}
{{- define "pav.pullSecretNames" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets -}}
{{- if kindIs "string" . }}{{ $names = append $names . }}{{ else }}{{ $names = append $names .name }}{{ end -}}
{{- end -}}
{{- join "," $names -}}
{{- end }}

{{/* The pod securityContext of pav's pods that need no root (the
controller, the uninstall check), as pav/src/manifests.rs writes it: the
image's user, 65532, for every container. */}}
{{- define "pav.nonRootPodSecurity" -}}
runAsGroup: 65532
runAsNonRoot: true
runAsUser: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The securityContext of their containers: no privilege escalation, no
capability, a read-only root. */}}
{{- define "pav.unprivilegedContainerSecurity" -}}
allowPrivilegeEscalation: false
capabilities:
  drop:
  - ALL
readOnlyRootFilesystem: true
{{- end }}
