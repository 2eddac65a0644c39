/** Where devices go on the map: their latitude/longitude attributes, checked. */

export interface MapDevice {
  node_id: string;
  title: string;
  online: boolean;
  latitude?: string;
  longitude?: string;
}

export interface Placed extends MapDevice {
  lat: number;
  lon: number;
}

/** A coordinate attribute as a number within its range, or undefined when unset or unusable. */
export function coordinate(value: string | undefined, limit: 90 | 180): number | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const n = Number(value);
  return Number.isFinite(n) && Math.abs(n) <= limit ? n : undefined;
}

/** Devices with both coordinates, and the others (listed beside the map). */
export function placeDevices(devices: MapDevice[]): { placed: Placed[]; unplaced: MapDevice[] } {
  const placed: Placed[] = [];
  const unplaced: MapDevice[] = [];
  for (const d of devices) {
    const lat = coordinate(d.latitude, 90);
    const lon = coordinate(d.longitude, 180);
    if (lat === undefined || lon === undefined) unplaced.push(d);
    else placed.push({ ...d, lat, lon });
  }
  const byTitle = (a: MapDevice, b: MapDevice) => a.title.localeCompare(b.title);
  return { placed: placed.sort(byTitle), unplaced: unplaced.sort(byTitle) };
}

/** Degrees of latitude and longitude a view spans at least. */
export interface Span {
  lat: number;
  lon: number;
}

/**
 * The smallest view around the devices: with the bundled outline (coarse coasts), a region of
 * countries, so one device is a dot with coasts around it, not a zoom into a featureless fill;
 * with tiles (streets), a town's surroundings.
 */
export const MIN_VIEW_SPAN: { outline: Span; tiles: Span } = { outline: { lat: 24, lon: 36 }, tiles: { lat: 0.4, lon: 0.6 } };
/** The closest zoom a fit may choose, per background. */
export const FIT_MAX_ZOOM = { outline: 5, tiles: 12 } as const;

/**
 * The view that shows every placed device: their bounds with a margin of 30% of their extent,
 * widened about their centre to `min`, kept within the latitudes a web map draws (±85°).
 * Answers [[south, west], [north, east]].
 */
export function viewBounds(points: readonly { lat: number; lon: number }[], min: Span): [[number, number], [number, number]] {
  let south = Math.min(...points.map((p) => p.lat));
  let north = Math.max(...points.map((p) => p.lat));
  let west = Math.min(...points.map((p) => p.lon));
  let east = Math.max(...points.map((p) => p.lon));
  const padLat = (north - south) * 0.3;
  const padLon = (east - west) * 0.3;
  south -= padLat;
  north += padLat;
  west -= padLon;
  east += padLon;
  const widen = (lo: number, hi: number, least: number): [number, number] => {
    if (hi - lo >= least) return [lo, hi];
    const mid = (lo + hi) / 2;
    return [mid - least / 2, mid + least / 2];
  };
  [south, north] = widen(south, north, min.lat);
  [west, east] = widen(west, east, min.lon);
  // Shift, not clip, a view that crosses a pole's edge: it keeps its size.
  if (north > 85) [south, north] = [south - (north - 85), 85];
  if (south < -85) [south, north] = [-85, north + (-85 - south)];
  return [
    [Math.max(-85, south), west],
    [Math.min(85, north), east],
  ];
}

/** A tile URL template with its coordinates filled in, as Leaflet does (for tests and checks). */
export function tileUrl(template: string, z: number, x: number, y: number): string {
  return template.replace('{z}', String(z)).replace('{x}', String(x)).replace('{y}', String(y)).replace('{s}', 'a');
}
