import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { durationsFrom, readDurations } from './durations.js';

const result = (name: string, startTime: number, endTime: number, tests = 1) => ({
  name,
  startTime,
  endTime,
  assertionResults: Array.from({ length: tests }, () => ({})),
});

describe('the expected durations table', () => {
  it("takes each file's first test to last test from a report, by its path in the checkout, the longer of a file run twice", () => {
    const table = durationsFrom(
      [
        result('/ci/repo/test/api/users.test.ts', 1000, 13_460),
        result('/ci/repo/test/api/users.test.ts', 5000, 9000),
        result('/ci/repo/shared/mux.test.ts', 0, 12_600),
        result('/ci/repo/shared/empty.test.ts', 0, 0, 0),
        result('/ci/repo/shared/quick.test.ts', 0, 3),
      ],
      '/ci/repo',
    );
    expect(table).toEqual({ 'shared/mux.test.ts': 12.6, 'shared/quick.test.ts': 0.1, 'test/api/users.test.ts': 12.5 });
  });

  it('reads a table, and nothing from one that is absent, malformed or holds no seconds', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'durations-'));
    try {
      const file = path.join(dir, 'durations.json');
      expect(readDurations(file)).toEqual({});
      fs.writeFileSync(file, '{"a.test.ts": 2.5, "b.test.ts": "x", "c.test.ts": -1, "d.test.ts": null}');
      expect(readDurations(file)).toEqual({ 'a.test.ts': 2.5 });
      fs.writeFileSync(file, '[1, 2]');
      expect(readDurations(file)).toEqual({});
      fs.writeFileSync(file, '{not json');
      expect(readDurations(file)).toEqual({});
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
