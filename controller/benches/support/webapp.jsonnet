// kro's webapp graph written as a Jsonnet sync hook, for benches/cel_hook.rs: the Deployment,
// the Service once the Deployment is available, the Ingress when enabled, the status from the
// Deployment's.
function(request)
  local p = request.parent;
  local s = p.spec;
  local observed = std.get(request.children, 'Deployment.apps/v1', {});
  local dep = std.get(observed, s.name, null);
  local ready = dep != null && std.get(std.get(dep, 'status', {}), 'availableReplicas', 0) == dep.spec.replicas;
  local labels(id) = { 'kro.run/owned': 'true', 'kro.run/node-id': id, 'kro.run/instance-name': p.metadata.name };
  local deployment = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: s.name, labels: { 'app.kubernetes.io/name': s.name } + labels('deployment') },
    spec: {
      replicas: s.replicas,
      selector: { matchLabels: { app: s.name } },
      template: {
        metadata: { labels: { app: s.name } },
        spec: { containers: [{ name: 'webapp', image: s.image, ports: [{ containerPort: s.port }] }] },
      },
    },
  };
  local service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: dep.metadata.name, labels: labels('service') },
    spec: { selector: { app: s.name }, ports: [{ name: 'http', port: 80, targetPort: s.port }] },
  };
  {
    status: if dep == null then {} else {
      availableReplicas: dep.status.availableReplicas,
      deploymentConditions: dep.status.conditions,
      state: if ready then 'ACTIVE' else 'IN_PROGRESS',
    },
    children: [deployment]
              + (if ready && s.service.enabled then [service] else [])
              + (if ready && s.ingress.enabled then [{ apiVersion: 'networking.k8s.io/v1', kind: 'Ingress', metadata: { name: s.name } }] else []),
  }
