/**
 * The Configure area (configuration:read with device:read to see, configuration:manage to change):
 * pick a group, a device or a tag; see each bundle's effective configuration and where it comes from
 * (`inherited_from`); edit the entity's own bundle in a form (the common bundles) or as JSON (the
 * others), staged as a change; list the staged changes with a diff against the committed state;
 * commit them with a message or discard them. The device page's "Show configuration" is here too.
 */
import { useMemo, useState } from 'preact/hooks';
import type { GroupTree, GroupTreeNode } from '../../../shared/api-types.js';
import { api, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { editable, maskSecrets, pretty } from '../config-forms.js';
import { Link, useLocation } from '../router.js';
import { ErrorBox, Loading, Notice, PageTitle, Tags, useLoad } from '../ui.js';
import { pruneTree } from './devices.js';
import { EntityConfig, SourceList } from './configure-bundle.js';
import { StagedChanges } from './configure-changes.js';
import { DeviceInventoryLists, FileStoreList } from './configure-fields.js';
import { BUNDLE_NAMES, deviceIds, entityHref, titles, type Change, type EntityType, type RenderedConfig } from './configure-model.js';

// ---- the picker: the group tree (groups and devices) and the tags ----

function PickerNode({ node, selected }: { node: GroupTreeNode; selected: string }) {
  const link = (
    <Link
      href={entityHref('node', node.node_id)}
      aria-current={selected === node.node_id ? 'true' : undefined}
      class={node.type === 'device' ? 'device-name' : 'group-name'}
    >
      {node.title || node.node_id}
    </Link>
  );
  if (node.type === 'device') return <li class="device-row">{link}</li>;
  return (
    <li class="group-row">
      {link} <Tags tags={node.tags} />
      {(node.nodes ?? []).length > 0 && (
        <ul>
          {node.nodes.map((c) => (
            <PickerNode key={c.node_id} node={c} selected={selected} />
          ))}
        </ul>
      )}
    </li>
  );
}

function Picker({ tree, tags, selected }: { tree?: GroupTreeNode; tags: string[]; selected: string }) {
  const [text, setText] = useState('');
  const shown = useMemo(() => (tree ? pruneTree(tree, { text, tag: '', status: '' }) : null), [tree, text]);
  return (
    <nav class="config-picker" aria-label="Entities">
      <div class="field">
        <label for="cfg-find">Find a group or device</label>
        <input id="cfg-find" type="search" value={text} onInput={(e) => setText(e.currentTarget.value)} />
      </div>
      {shown ? (
        <ul class="tree">
          <PickerNode node={shown} selected={selected} />
        </ul>
      ) : (
        <p class="muted">Nothing matches.</p>
      )}
      {tags.length > 0 && (
        <>
          <h2 class="small">Tags</h2>
          <ul class="tag-picker">
            {tags.map((t) => (
              <li key={t}>
                <Link href={entityHref('tag', t)} class="tag" aria-current={selected === `tag:${t}` ? 'true' : undefined}>
                  {t}
                </Link>
              </li>
            ))}
          </ul>
        </>
      )}
    </nav>
  );
}

export function ConfigureScreen() {
  const { query } = useLocation();
  const type: EntityType = query.get('type') === 'tag' ? 'tag' : 'node';
  const id = query.get('id') ?? '';
  const bundleParam = query.get('bundle') ?? '';
  const bundle = BUNDLE_NAMES.includes(bundleParam) ? bundleParam : 'settings';
  const tree = useLoad(() => api.get<GroupTree>('/grouptree', { _format: 'json' }), []);
  const tags = useLoad(() => api.get('/tagslist').then((a) => itemsOf<string | { tag?: string; name?: string }>(a)), []);
  const changes = useLoad(() => api.get<Change[]>('/changelist'), []);
  const [notice, setNotice] = useState('');
  const [round, setRound] = useState(0);
  const names = useMemo(() => titles(tree.data?.tree), [tree.data]);
  const tagNames = (tags.data ?? []).map((t) => (typeof t === 'string' ? t : (t.tag ?? t.name ?? ''))).filter(Boolean);
  const refresh = (text: string) => {
    setNotice(text);
    changes.reload();
    setRound((n) => n + 1);
  };
  const selected = type === 'tag' ? `tag:${id}` : id;
  return (
    <section>
      <PageTitle>Configure</PageTitle>
      {allowed('configureModify') && allowed('configureFileSelector') && <FileStoreList />}
      {allowed('configureModify') && allowed('configureInventoryPopups') && type === 'node' && id && deviceIds(tree.data?.tree).has(id) && (
        <DeviceInventoryLists deviceId={id} />
      )}
      {notice && <Notice>{notice}</Notice>}
      <ErrorBox error={tree.error ?? changes.error} />
      <div class="configure-layout">
        <div>{tree.loading && !tree.data ? <Loading what="the tree" /> : <Picker tree={tree.data?.tree} tags={tagNames} selected={selected} />}</div>
        <div class="stack">
          {id ? (
            <EntityConfig
              key={`${selected}:${round}`}
              type={type}
              id={id}
              bundle={bundle}
              title={type === 'tag' ? id : (names.get(id) ?? id)}
              changes={changes.data ?? []}
              onStaged={refresh}
            />
          ) : (
            <p class="muted">Pick a group, a device or a tag to see its configuration{allowed('configureModify') ? ' and change it' : ''}.</p>
          )}
          {changes.data && <StagedChanges changes={changes.data} names={names} onChanged={refresh} />}
        </div>
      </div>
    </section>
  );
}

// ---- the device page's "Show configuration" ----

/** What the device page reads of a device's node in the group tree: the commit its agent applied and whether it is current. */
type DeviceState = Pick<GroupTreeNode, 'device_commit_sha' | 'config_propagated'>;

function findNode(node: GroupTreeNode | undefined, id: string): GroupTreeNode | undefined {
  if (!node) return undefined;
  if (node.node_id === id) return node;
  for (const c of node.nodes ?? []) {
    const found = findNode(c, id);
    if (found) return found;
  }
  return undefined;
}

export function DeviceConfiguration({ deviceId }: { deviceId: string }) {
  const [shown, setShown] = useState(false);
  return (
    <div>
      <button type="button" aria-expanded={shown} onClick={() => setShown(!shown)}>
        {shown ? 'Hide configuration' : 'Show configuration'}
      </button>{' '}
      {allowed('configure') && <Link href={entityHref('node', deviceId)}>Configure this device</Link>}
      {shown && <DeviceConfigurationView deviceId={deviceId} />}
    </div>
  );
}

function DeviceConfigurationView({ deviceId }: { deviceId: string }) {
  const config = useLoad(() => api.get<RenderedConfig>(`/config/${encodeURIComponent(deviceId)}`), [deviceId]);
  const state = useLoad(
    () =>
      api
        .get<GroupTree>('/grouptree', { _format: 'json' })
        .then((t): DeviceState => findNode(t.tree, deviceId) ?? {})
        .catch((): DeviceState => ({})),
    [deviceId],
  );
  if (config.error) return <ErrorBox error={config.error} />;
  if (!config.data) return <Loading what="the configuration" />;
  const c = config.data.config;
  const applied = state.data?.device_commit_sha ?? '';
  return (
    <div data-testid="device-config">
      <dl class="kv">
        <dt>Commit of its configuration</dt>
        <dd>{c.commit_id ? <code>{c.commit_id.slice(0, 12)}</code> : <span class="muted">none yet</span>}</dd>
        <dt>Applied by the agent</dt>
        <dd data-testid="device-commit-sha">{applied ? <code>{applied.slice(0, 12)}</code> : <span class="muted">nothing yet</span>}</dd>
        <dt>Propagated</dt>
        <dd data-testid="config-propagated">{state.data?.config_propagated ? 'yes: the device runs its current configuration' : 'no: not applied yet'}</dd>
      </dl>
      {c.bundles.length === 0 && <p class="muted">No configuration applies to this device.</p>}
      {Object.entries(c.bundle_data).map(([bundle, data]) => (
        <details key={bundle} class="device-bundle" data-testid={`device-bundle-${bundle}`}>
          <summary>
            <strong>{bundle}</strong>
            {data.enabled === false && <span class="badge">disabled</span>} <span class="muted small">from</span> <SourceList sources={data.inherited_from} />
          </summary>
          <pre class="config-json">{pretty(maskSecrets(bundle, editable(data)))}</pre>
        </details>
      ))}
    </div>
  );
}
