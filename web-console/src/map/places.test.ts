import { describe, expect, it } from 'vitest';
import { coordinate, MIN_VIEW_SPAN, placeDevices, viewBounds } from './places.js';

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

describe('the view around the devices', () => {
  it('widens one device to the least span about it (a region of countries on the outline), never a point', () => {
    expect(viewBounds([{ lat: 59.9, lon: 10.7 }], MIN_VIEW_SPAN.outline)).toEqual([
      [59.9 - 12, 10.7 - 18],
      [59.9 + 12, 10.7 + 18],
    ]);
    const [[s, w], [n, e]] = viewBounds([{ lat: 59.9, lon: 10.7 }], MIN_VIEW_SPAN.tiles);
    expect(n - s).toBeCloseTo(0.4);
    expect(e - w).toBeCloseTo(0.6);
  });

  it('keeps devices far apart in view, with a margin of 30% of their extent', () => {
    expect(
      viewBounds(
        [
          { lat: -10, lon: -50 },
          { lat: 50, lon: 50 },
        ],
        MIN_VIEW_SPAN.outline,
      ),
    ).toEqual([
      [-28, -80],
      [68, 80],
    ]);
  });

  it('widens close devices about their centre', () => {
    const [[s, w], [n, e]] = viewBounds(
      [
        { lat: 10, lon: 20 },
        { lat: 11, lon: 22 },
      ],
      MIN_VIEW_SPAN.outline,
    );
    expect((s + n) / 2).toBeCloseTo(10.5);
    expect((w + e) / 2).toBeCloseTo(21);
    expect(n - s).toBeCloseTo(24);
    expect(e - w).toBeCloseTo(36);
  });

  it('shifts a view near a pole inside ±85°, keeping its size', () => {
    const [[s], [n]] = viewBounds([{ lat: 80, lon: 0 }], MIN_VIEW_SPAN.outline);
    expect(n).toBe(85);
    expect(n - s).toBeCloseTo(24);
    const [[s2], [n2]] = viewBounds([{ lat: -84, lon: 0 }], MIN_VIEW_SPAN.outline);
    expect(s2).toBe(-85);
    expect(n2 - s2).toBeCloseTo(24);
  });
});
