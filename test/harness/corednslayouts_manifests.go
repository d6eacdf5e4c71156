package harness

// The Deployments of CoreDNSLayout, each as its distribution publishes it
// (the sources are named at K3sCoreDNS, RKE2CoreDNS and EKSCoreDNS).
// Formatted with the image (%[1]s), the ConfigMap's checksum (%[2]s) and
// RKE2's affinity (%[3]s); the published image names and registry
// placeholders are the image, nothing else is changed.

// k3sDeployment: manifests/coredns.yaml of k3s, %{SYSTEM_DEFAULT_REGISTRY}%
// empty.
const k3sDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
    kubernetes.io/name: "CoreDNS"
spec:
  revisionHistoryLimit: 0
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
  selector:
    matchLabels:
      k8s-app: kube-dns
  template:
    metadata:
      labels:
        k8s-app: kube-dns
    spec:
      priorityClassName: "system-cluster-critical"
      serviceAccountName: coredns
      tolerations:
        - key: "CriticalAddonsOnly"
          operator: "Exists"
        - key: "node-role.kubernetes.io/control-plane"
          operator: "Exists"
          effect: "NoSchedule"
        - key: "node-role.kubernetes.io/master"
          operator: "Exists"
          effect: "NoSchedule"
      nodeSelector:
        kubernetes.io/os: linux
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
          labelSelector:
            matchLabels:
              k8s-app: kube-dns
      containers:
      - name: coredns
        image: "%[1]s"
        imagePullPolicy: IfNotPresent
        resources:
          limits:
            memory: 170Mi
          requests:
            cpu: 100m
            memory: 70Mi
        args: [ "-conf", "/etc/coredns/Corefile" ]
        volumeMounts:
        - name: config-volume
          mountPath: /etc/coredns
          readOnly: true
        - name: custom-config-volume
          mountPath: /etc/coredns/custom
          readOnly: true
        ports:
        - containerPort: 53
          name: dns
          protocol: UDP
        - containerPort: 53
          name: dns-tcp
          protocol: TCP
        - containerPort: 9153
          name: metrics
          protocol: TCP
        securityContext:
          allowPrivilegeEscalation: false
          capabilities:
            add:
            - NET_BIND_SERVICE
            drop:
            - all
          readOnlyRootFilesystem: true
        livenessProbe:
          httpGet:
            path: /health
            port: 8080
            scheme: HTTP
          initialDelaySeconds: 60
          periodSeconds: 10
          timeoutSeconds: 1
          successThreshold: 1
          failureThreshold: 3
        readinessProbe:
          httpGet:
            path: /ready
            port: 8181
            scheme: HTTP
          initialDelaySeconds: 0
          periodSeconds: 2
          timeoutSeconds: 1
          successThreshold: 1
          failureThreshold: 3
      dnsPolicy: Default
      volumes:
        - name: config-volume
          configMap:
            name: coredns
            items:
            - key: Corefile
              path: Corefile
            - key: NodeHosts
              path: NodeHosts
        - name: custom-config-volume
          configMap:
            name: coredns-custom
            optional: true
`

// rke2Affinity is RKE2's value affinity of rke2-coredns: one DNS pod per
// node, required.
const rke2Affinity = `      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - topologyKey: "kubernetes.io/hostname"
            labelSelector:
              matchExpressions:
              - key: k8s-app
                operator: In
                values:
                - kube-dns
`

// RKE2PreferredAffinity is rke2-coredns's value affinity as a
// HelmChartConfig may set it: rke2Affinity's term, preferred.
const RKE2PreferredAffinity = `      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: "kubernetes.io/hostname"
              labelSelector:
                matchExpressions:
                - key: k8s-app
                  operator: In
                  values:
                  - kube-dns
`

// rke2Deployment: the chart's templates/deployment.yaml with RKE2's values
// (isClusterService, k8sApp kube-dns, serviceAccount coredns,
// priorityClassName system-cluster-critical, its nodeSelector, tolerations
// and affinity, autoscaler enabled, so no replicas) and the upstream
// chart's defaults for the rest (resources, probes, the ports of the
// default servers), release rke2-coredns of chart rke2-coredns.
const rke2Deployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rke2-coredns-rke2-coredns
  namespace: kube-system
  labels:
    app.kubernetes.io/managed-by: "Helm"
    app.kubernetes.io/instance: "rke2-coredns"
    helm.sh/chart: "rke2-coredns-1.10.1"
    k8s-app: "kube-dns"
    kubernetes.io/cluster-service: "true"
    kubernetes.io/name: "CoreDNS"
    app.kubernetes.io/name: rke2-coredns
spec:
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
      maxSurge: 10%%
  selector:
    matchLabels:
      app.kubernetes.io/instance: "rke2-coredns"
      k8s-app: "kube-dns"
      app.kubernetes.io/name: rke2-coredns
  template:
    metadata:
      labels:
        k8s-app: "kube-dns"
        app.kubernetes.io/name: rke2-coredns
        app.kubernetes.io/instance: "rke2-coredns"
      annotations:
        checksum/config: %[2]s
        scheduler.alpha.kubernetes.io/critical-pod: ''
    spec:
      serviceAccountName: coredns
      priorityClassName: "system-cluster-critical"
      dnsPolicy: Default
%[3]s      tolerations:
        - key: CriticalAddonsOnly
          operator: Exists
        - key: "node-role.kubernetes.io/control-plane"
          operator: "Exists"
          effect: "NoSchedule"
        - key: "node-role.kubernetes.io/etcd"
          operator: "Exists"
          effect: "NoExecute"
      nodeSelector:
        kubernetes.io/os: linux
      containers:
      - name: "coredns"
        image: %[1]s
        imagePullPolicy: IfNotPresent
        args: [ "-conf", "/etc/coredns/Corefile" ]
        volumeMounts:
        - name: config-volume
          mountPath: /etc/coredns
        resources:
          limits:
            cpu: 100m
            memory: 128Mi
          requests:
            cpu: 100m
            memory: 128Mi
        ports:
        - {containerPort: 53, protocol: UDP, name: udp-53}
        - {containerPort: 53, protocol: TCP, name: tcp-53}
        - {containerPort: 9153, protocol: TCP, name: tcp-9153}
        livenessProbe:
          httpGet:
            path: /health
            port: 8080
            scheme: HTTP
          initialDelaySeconds: 60
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 5
        readinessProbe:
          httpGet:
            path: /ready
            port: 8181
            scheme: HTTP
          initialDelaySeconds: 10
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 5
      volumes:
        - name: config-volume
          configMap:
            name: rke2-coredns-rke2-coredns
            items:
            - key: Corefile
              path: Corefile
`

// eksDeployment: the Deployment of eksctl's coredns-1.32.json, in YAML,
// the image's account, region and domain those of us-west-2.
const eksDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  annotations: {}
  labels:
    eks.amazonaws.com/component: coredns
    k8s-app: kube-dns
    kubernetes.io/name: CoreDNS
  name: coredns
  namespace: kube-system
spec:
  progressDeadlineSeconds: 600
  replicas: 2
  revisionHistoryLimit: 10
  selector:
    matchLabels:
      eks.amazonaws.com/component: coredns
      k8s-app: kube-dns
  strategy:
    rollingUpdate:
      maxSurge: 25%%
      maxUnavailable: 1
    type: RollingUpdate
  template:
    metadata:
      labels:
        eks.amazonaws.com/component: coredns
        k8s-app: kube-dns
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - key: kubernetes.io/os
                operator: In
                values: [linux]
              - key: kubernetes.io/arch
                operator: In
                values: [amd64, arm64]
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - podAffinityTerm:
              labelSelector:
                matchExpressions:
                - key: k8s-app
                  operator: In
                  values: [kube-dns]
              topologyKey: kubernetes.io/hostname
            weight: 100
      containers:
      - args: [-conf, /etc/coredns/Corefile]
        image: %[1]s
        imagePullPolicy: IfNotPresent
        livenessProbe:
          failureThreshold: 5
          httpGet: {path: /health, port: 8080, scheme: HTTP}
          initialDelaySeconds: 60
          periodSeconds: 10
          successThreshold: 1
          timeoutSeconds: 5
        name: coredns
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        - {containerPort: 9153, name: metrics, protocol: TCP}
        readinessProbe:
          failureThreshold: 3
          httpGet: {path: /ready, port: 8181, scheme: HTTP}
          periodSeconds: 10
          successThreshold: 1
          timeoutSeconds: 1
        resources:
          limits: {memory: 170Mi}
          requests: {cpu: 100m, memory: 70Mi}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities:
            add: [NET_BIND_SERVICE]
            drop: [ALL]
          readOnlyRootFilesystem: true
        terminationMessagePath: /dev/termination-log
        terminationMessagePolicy: File
        volumeMounts:
        - {mountPath: /etc/coredns, name: config-volume, readOnly: true}
      dnsPolicy: Default
      priorityClassName: system-cluster-critical
      restartPolicy: Always
      schedulerName: default-scheduler
      serviceAccountName: coredns
      terminationGracePeriodSeconds: 30
      tolerations:
      - {effect: NoSchedule, key: node-role.kubernetes.io/control-plane}
      - {key: CriticalAddonsOnly, operator: Exists}
      topologySpreadConstraints:
      - labelSelector:
          matchLabels: {k8s-app: kube-dns}
        maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: ScheduleAnyway
      volumes:
      - configMap:
          defaultMode: 420
          items:
          - {key: Corefile, path: Corefile}
          name: coredns
        name: config-volume
`
