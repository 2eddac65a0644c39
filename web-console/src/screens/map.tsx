/**
 * The Map (inventory:read): devices placed by their latitude/longitude attributes, from the fleet
 * inventory (GET /inventory). Tiles come from the broker's MAP_TILE_URL setting (GET
 * /webconsole/settings); without one, or when its tiles do not load, the map draws a bundled world
 * outline (Natural Earth 1:110m land, public domain) and a graticule, and loads nothing from
 * elsewhere. Devices without coordinates are listed beside the map. This module and Leaflet load
 * on first use.
 */
import 'leaflet/dist/leaflet.css';
import L from 'leaflet';
import type { ConsoleSettings, InventoryListItem, ListPage } from '../../../shared/api-types.js';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import LAND from '../map/land-110m.json' with { type: 'json' };
import { FIT_MAX_ZOOM, MIN_VIEW_SPAN, placeDevices, viewBounds, type MapDevice, type Placed } from '../map/places.js';
import { useDeviceEvents, type DeviceEvent } from '../events.js';
import { Link, navigate } from '../router.js';
import { ErrorBox, Loading, Notice, PageTitle } from '../ui.js';

const PAGE = 1000;
/** At most this many devices are read for the map (pages of 1000). */
const MAX_DEVICES = 20_000;

async function loadDevices(): Promise<MapDevice[]> {
  const out: MapDevice[] = [];
  for (let offset = 0; offset < MAX_DEVICES; offset += PAGE) {
    const page = await api.get<ListPage<InventoryListItem>>('/inventory', { items_per_page: PAGE, offset });
    for (const d of itemsOf<InventoryListItem>(page)) {
      out.push({
        node_id: d.node_id,
        title: d.title || d.node_id.slice(0, 12),
        online: d.connected === true || d.status === 'online',
        latitude: d.attributes?.latitude,
        longitude: d.attributes?.longitude,
      });
    }
    if (offset + PAGE >= page.total) break;
  }
  return out;
}

/** The bundled outline: land polygons ([lon, lat] rings) and a 30° graticule. */
function outlineLayer(): L.LayerGroup {
  const group = L.layerGroup();
  const polygons = (LAND as number[][][][]).map((poly) => poly.map((ring) => ring.map(([lon, lat]) => [lat, lon] as L.LatLngTuple)));
  L.polygon(polygons, { color: '#8a96a8', weight: 1, fillColor: '#e4e8ee', fillOpacity: 1, interactive: false }).addTo(group);
  const lines: L.LatLngTuple[][] = [];
  for (let lon = -180; lon <= 180; lon += 30)
    lines.push([
      [-85, lon],
      [85, lon],
    ]);
  for (let lat = -60; lat <= 60; lat += 30)
    lines.push([
      [lat, -180],
      [lat, 180],
    ]);
  L.polyline(lines, { color: '#b8c2d0', weight: 0.6, dashArray: '2 4', interactive: false }).addTo(group);
  return group;
}

/** Leaflet puts strings in as HTML: device names (set by users and agents) go in as text. */
function textNode(text: string): HTMLElement {
  const el = document.createElement('span');
  el.textContent = text;
  return el;
}

/** The tile credit as text (Leaflet's attribution control takes HTML). */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const ONLINE = '#1a7f37';
const OFFLINE = '#8c959f';

function MapView({ placed, settings, live }: { placed: Placed[]; settings: ConsoleSettings; live: Map<string, DeviceEvent> }) {
  const el = useRef<HTMLDivElement>(null);
  const byId = useRef(new Map<string, L.CircleMarker>());
  const [fallback, setFallback] = useState<'none' | 'outline' | 'tiles-failed'>(settings.map.tile_url ? 'none' : 'outline');
  useEffect(() => {
    if (!el.current) return;
    const map = L.map(el.current, { worldCopyJump: true, minZoom: 1, maxZoom: 18, zoomSnap: 0.5 });
    // Leaflet's own credit, without its flag image; the tile provider's credit when there are tiles.
    map.attributionControl.setPrefix('Leaflet');
    let outline: L.LayerGroup | null = null;
    const showOutline = () => {
      if (outline) return;
      outline = outlineLayer().addTo(map);
      map.attributionControl.addAttribution('Natural Earth');
    };
    const url = settings.map.tile_url;
    if (url) {
      let loaded = 0;
      let failed = 0;
      const tiles = L.tileLayer(url, { attribution: escapeHtml(settings.map.attribution) || undefined, maxZoom: 18, crossOrigin: false });
      tiles.on('tileload', () => (loaded += 1));
      tiles.on('tileerror', () => {
        failed += 1;
        // No tile has come: the source is unreachable; draw the outline instead.
        if (loaded === 0 && failed >= 2) {
          map.removeLayer(tiles);
          showOutline();
          setFallback('tiles-failed');
          // A street-level view of the coarse outline is a featureless fill: widen it to the outline's least view.
          if (placed.length > 0 && map.getZoom() > FIT_MAX_ZOOM.outline) {
            map.fitBounds(viewBounds(placed, MIN_VIEW_SPAN.outline), { maxZoom: FIT_MAX_ZOOM.outline });
          }
        }
      });
      tiles.addTo(map);
    } else {
      showOutline();
    }
    const markers = L.featureGroup();
    const placedBy = new Map<L.Layer, Placed>();
    for (const d of placed) {
      const marker = L.circleMarker([d.lat, d.lon], {
        radius: 7,
        weight: 2,
        color: '#fff',
        fillColor: d.online ? ONLINE : OFFLINE,
        fillOpacity: 1,
        className: `device-marker ${d.online ? 'online' : 'offline'}`,
      });
      marker.bindTooltip(textNode(`${d.title} (${d.online ? 'online' : 'offline'})`));
      if (allowed('devices')) marker.on('click', () => navigate(`/devices/${d.node_id}`));
      marker.addTo(markers);
      placedBy.set(marker, d);
      byId.current.set(d.node_id, marker);
    }
    markers.addTo(map);
    // Zoom as it changes, for tests and for whoever inspects the page.
    map.on('zoomend', () => el.current?.setAttribute('data-zoom', String(map.getZoom())));
    const background = url ? 'tiles' : 'outline';
    if (placed.length > 0) map.fitBounds(viewBounds(placed, MIN_VIEW_SPAN[background]), { maxZoom: FIT_MAX_ZOOM[background] });
    else map.setView([20, 0], 1);
    el.current.setAttribute('data-zoom', String(map.getZoom()));
    // Leaflet draws each marker as an SVG path once the map has a view: name it for assistive technology and tests.
    markers.eachLayer((layer) => {
      const d = placedBy.get(layer);
      const path = (layer as L.CircleMarker).getElement();
      if (!d || !path) return;
      path.setAttribute('data-node-id', d.node_id);
      path.setAttribute('aria-label', d.title);
      path.setAttribute('role', allowed('devices') ? 'link' : 'img');
    });
    const resize = new ResizeObserver(() => map.invalidateSize());
    resize.observe(el.current);
    return () => {
      resize.disconnect();
      byId.current.clear();
      map.remove();
    };
  }, [placed, settings]);
  // Devices going online and offline recolour their marker in place: the view stays where the user put it.
  useEffect(() => {
    for (const [id, e] of live) {
      const marker = byId.current.get(id);
      if (!marker) continue;
      const online = e.event === 'device.online';
      marker.setStyle({ fillColor: online ? ONLINE : OFFLINE });
      marker.getElement()?.classList.toggle('online', online);
      marker.getElement()?.classList.toggle('offline', !online);
      const d = placed.find((p) => p.node_id === id);
      if (d) marker.setTooltipContent(textNode(`${d.title} (${online ? 'online' : 'offline'})`));
    }
  }, [live, placed]);
  return (
    <>
      {fallback === 'tiles-failed' && <Notice>The map tiles could not be loaded: showing the world outline instead.</Notice>}
      <div
        ref={el}
        class={`map-view${fallback === 'none' ? '' : ' outline'}`}
        data-testid="map"
        data-fallback={fallback}
        role="region"
        aria-label="Map of devices"
      />
    </>
  );
}

/** A status dot without its word (the title says it), for the lists beside the map. */
function DeviceDot({ online }: { online: boolean }) {
  return (
    <span class={`status map-dot ${online ? 'online' : 'offline'}`} title={online ? 'online' : 'offline'}>
      <span class="dot" aria-hidden="true" />
      <span class="visually-hidden">{online ? 'online' : 'offline'}</span>
    </span>
  );
}

export function MapScreen() {
  const [state, setState] = useState<{ devices?: MapDevice[]; settings?: ConsoleSettings; error?: unknown; round: number }>({ round: 0 });
  useEffect(() => {
    let live = true;
    Promise.all([loadDevices(), api.get<ConsoleSettings>('/webconsole/settings')]).then(
      ([devices, settings]) => live && setState((s) => ({ ...s, devices, settings, error: undefined })),
      (error: unknown) => live && setState((s) => ({ ...s, error })),
    );
    return () => {
      live = false;
    };
  }, [state.round]);
  // With device:read, devices go online and offline on the map as the broker tells (GET /events).
  const [live, setLive] = useState<Map<string, DeviceEvent>>(new Map());
  useEffect(() => setLive(new Map()), [state.devices]);
  useDeviceEvents(
    allowed('devices'),
    (e) => setLive((m) => new Map(m).set(e.device_id, e)),
    () => setState((s) => ({ ...s, round: s.round + 1 })),
  );
  const split = useMemo(() => {
    if (!state.devices) return null;
    return placeDevices(state.devices.map((d) => (live.has(d.node_id) ? { ...d, online: live.get(d.node_id)?.event === 'device.online' } : d)));
  }, [state.devices, live]);
  // The map itself is drawn from the loaded devices only; live changes recolour its markers.
  const drawn = useMemo(() => (state.devices ? placeDevices(state.devices).placed : []), [state.devices]);
  const open = allowed('devices');
  return (
    <section class="map-screen">
      <PageTitle
        actions={
          <button type="button" onClick={() => setState((s) => ({ ...s, round: s.round + 1 }))}>
            Refresh
          </button>
        }
      >
        Map
      </PageTitle>
      <ErrorBox error={state.error} />
      {!split && !state.error && <Loading what="the map" />}
      {split && state.settings && (
        <div class="map-layout">
          <MapView placed={drawn} settings={state.settings} live={live} />
          <aside class="map-aside" aria-label="Devices on the map and without coordinates">
            <h2>On the map ({split.placed.length})</h2>
            <ul class="plain-list" data-testid="placed-devices">
              {split.placed.map((d) => (
                <li key={d.node_id}>
                  <DeviceDot online={d.online} /> {open ? <Link href={`/devices/${d.node_id}`}>{d.title}</Link> : d.title}{' '}
                  <span class="muted small">
                    {d.lat.toFixed(3)}, {d.lon.toFixed(3)}
                  </span>
                </li>
              ))}
            </ul>
            <h2>Without coordinates ({split.unplaced.length})</h2>
            {split.unplaced.length === 0 ? (
              <p class="muted">Every device has a place.</p>
            ) : (
              <ul class="plain-list" data-testid="unplaced-devices">
                {split.unplaced.map((d) => (
                  <li key={d.node_id}>
                    <DeviceDot online={d.online} /> {open ? <Link href={`/devices/${d.node_id}`}>{d.title}</Link> : d.title}
                  </li>
                ))}
              </ul>
            )}
            {open && allowed('updateAttributes') && <p class="muted small">Set a device's latitude and longitude among its attributes to place it.</p>}
          </aside>
        </div>
      )}
    </section>
  );
}
