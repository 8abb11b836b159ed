{{/* Labels every object of the release carries besides the project manifests' own. */}}
{{- define "rdma-ns.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* repository:tag of an image value. */}}
{{- define "rdma-ns.image" -}}
{{ .repository }}:{{ .tag }}
{{- end -}}

{{/* The driver's ServiceAccount as the API server names its user (the admission policy's match). */}}
{{- define "rdma-ns.driverUser" -}}
system:serviceaccount:{{ .Values.namespace }}:rdma-ns-dra
{{- end -}}
