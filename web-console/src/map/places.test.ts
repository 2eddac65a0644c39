import { describe, expect, it } from 'vitest';
import { coordinate, placeDevices } from './places.js';

describe('placing devices on the map', () => {
  it('reads coordinates in range, and nothing else', () => {
    expect(coordinate('63.43', 90)).toBe(63.43);
    expect(coordinate('-180', 180)).toBe(-180);
    expect(coordinate('', 90)).toBeUndefined();
    expect(coordinate(undefined, 90)).toBeUndefined();
    expect(coordinate('91', 90)).toBeUndefined();
    expect(coordinate('north', 90)).toBeUndefined();
    expect(coordinate('Infinity', 180)).toBeUndefined();
  });

  it('places devices with both coordinates and lists the others, by title', () => {
    const { placed, unplaced } = placeDevices([
      { node_id: 'b', title: 'b', online: true, latitude: '10', longitude: '20' },
      { node_id: 'a', title: 'a', online: false, latitude: '10' },
      { node_id: 'c', title: 'c', online: false },
      { node_id: '0', title: '0', online: true, latitude: '0', longitude: '0' },
    ]);
    expect(placed.map((p) => [p.node_id, p.lat, p.lon])).toEqual([
      ['0', 0, 0],
      ['b', 10, 20],
    ]);
    expect(unplaced.map((d) => d.node_id)).toEqual(['a', 'c']);
  });
});
