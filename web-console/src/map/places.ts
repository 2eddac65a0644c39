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

/** A tile URL template with its coordinates filled in, as Leaflet does (for tests and checks). */
export function tileUrl(template: string, z: number, x: number, y: number): string {
  return template.replace('{z}', String(z)).replace('{x}', String(x)).replace('{y}', String(y)).replace('{s}', 'a');
}
