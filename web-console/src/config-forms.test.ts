import { describe, expect, it } from 'vitest';
import { BUNDLE_FORMS, type FieldSpec, editable, lineDiff, maskSecrets, newItem, parseJsonObject, pretty, validate } from './config-forms.js';

describe('Configure forms', () => {
  it('finds missing and malformed fields at any depth, by path', () => {
    const fields = BUNDLE_FORMS.file_distribution.fields;
    const value = {
      files: [
        {
          label: 'x',
          templates: [
            { source: 'relative', destination: '' },
            { source: '/a', destination: '/b' },
          ],
        },
      ],
    };
    expect(validate(fields, value)).toEqual({
      'files.0.templates.0.source': 'Source (file store path) must be an absolute path (start with /).',
      'files.0.templates.0.destination': 'Destination on the device is required.',
    });
    expect(validate(BUNDLE_FORMS.settings.fields, { agentinterval: 0 })).toHaveProperty('agentinterval');
    expect(validate(BUNDLE_FORMS.settings.fields, { agentinterval: 5 })).toEqual({});
    expect(validate(BUNDLE_FORMS.ntp.fields, { servers: ['pool.ntp.org', 'bad host!'] })).toHaveProperty('servers.1');
    expect(
      validate(BUNDLE_FORMS.proc_watch.fields, { processes: [newItem((BUNDLE_FORMS.proc_watch.fields[0] as Extract<FieldSpec, { kind: 'list' }>).fields)] }),
    ).toEqual({
      'processes.0.name': 'Name is required.',
      'processes.0.command': 'Command is required.',
    });
    expect(validate(BUNDLE_FORMS.firewall.fields, { tables: { filter: { INPUT: { policy: 'MAYBE', rules: [] } } } })).toHaveProperty(
      'tables.filter.INPUT.policy',
    );
  });

  it('checks the JSON editor: an object, or why not', () => {
    expect(parseJsonObject('{"a":1}')).toEqual({ value: { a: 1 } });
    expect(parseJsonObject('{"a":').error).toMatch(/Not valid JSON/);
    expect(parseJsonObject('[1]').error).toMatch(/JSON object/);
    expect(parseJsonObject('null').error).toMatch(/JSON object/);
  });

  it('strips the broker’s metadata from what a form edits and masks secrets for display', () => {
    expect(editable({ enabled: true, inherited_from: [], bundle_commit_id: 'x', inherits: {}, extend: true, servers: ['a'] })).toEqual({
      enabled: true,
      servers: ['a'],
    });
    expect(maskSecrets('parameters', { secrets: [{ key: 'k', value: 'secret-ref:abc' }] })).toEqual({ secrets: [{ key: 'k', value: '********' }] });
    expect(maskSecrets('ntp', { servers: ['a'] })).toEqual({ servers: ['a'] });
    expect(maskSecrets('docker_containers', { registry_auths: [{ server: 'r', username: 'u', password: 'secret-ref:abc' }] })).toEqual({
      registry_auths: [{ server: 'r', username: 'u', password: '********' }],
    });
    expect(maskSecrets('password', { users: [{ username: 'root', passwordhash: '$6$x$y' }] })).toEqual({
      users: [{ username: 'root', passwordhash: '********' }],
    });
  });

  it('diffs two configurations line by line, keys in a stable order', () => {
    expect(pretty({ b: 1, a: 2 })).toBe(pretty({ a: 2, b: 1 }));
    const d = lineDiff(pretty({ servers: ['a', 'b'] }), pretty({ servers: ['a', 'c'] }));
    expect(d.filter((l) => l.op !== ' ')).toEqual([
      { op: '-', text: '    "b"' },
      { op: '+', text: '    "c"' },
    ]);
    expect(lineDiff('', 'x')).toEqual([{ op: '+', text: 'x' }]);
    expect(lineDiff('x', '')).toEqual([{ op: '-', text: 'x' }]);
  });
});
