local ports(spec) = [
  local pair = std.split(p, ':');
  { name: 'port-' + pair[0], port: std.parseInt(pair[0]), targetPort: std.parseInt(pair[1]) }
  for p in std.split(spec, ',')
];
function(request)
  local sts = request.object;
  local label = sts.metadata.annotations['service-per-pod-label'];
  {
    attachments: [
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: '%s-%d' % [sts.metadata.name, i], labels: { app: 'service-per-pod' } },
        spec: {
          selector: { [label]: '%s-%d' % [sts.metadata.name, i] },
          ports: ports(sts.metadata.annotations['service-per-pod-ports']),
        },
      }
      for i in std.range(0, sts.spec.replicas - 1)
    ],
  }
