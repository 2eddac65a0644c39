import { describe, expect, it } from 'vitest';
import type { GroupTree } from './api-types.js';
import { cliDeviceArgument, deviceNameOf, namedDevices, shellWord } from './device-names.js';

const id = (c: string) => c.repeat(64);

describe('cliDeviceArgument', () => {
  it('names a device by its name when the CLI resolves that name to it', () => {
    const devices = [
      { id: id('a'), name: 'camera-1' },
      { id: id('b'), name: 'camera-2' },
    ];
    expect(cliDeviceArgument(id('a'), devices)).toEqual({ arg: 'camera-1' });
  });

  it('falls back to the id, saying why, when the name is shared, reads as an id or as an option', () => {
    const shared = [
      { id: id('a'), name: 'pi' },
      { id: id('b'), name: 'pi' },
    ];
    expect(cliDeviceArgument(id('a'), shared)).toEqual({ arg: id('a'), reason: '2 devices you can see are named "pi"' });
    expect(cliDeviceArgument(id('a'), [{ id: id('a'), name: id('c') }]).arg).toBe(id('a'));
    expect(cliDeviceArgument(id('a'), [{ id: id('a'), name: '-rf' }]).reason).toMatch(/dash/);
    // Not in the caller's list (yet): the id, which always works.
    expect(cliDeviceArgument(id('a'), [])).toEqual({ arg: id('a') });
  });

  it('quotes a name for the shell when it needs quoting', () => {
    expect(cliDeviceArgument(id('a'), [{ id: id('a'), name: "Bob's pi $HOME" }]).arg).toBe(`'Bob'\\''s pi $HOME'`);
    expect(shellWord('gw-1.site_a')).toBe('gw-1.site_a');
    expect(shellWord('a;b')).toBe("'a;b'");
  });
});

describe('namedDevices', () => {
  it('walks the group tree with the names the CLI lists', () => {
    const tree = {
      total_devices: 2,
      tree: {
        id: 'root',
        node_id: 'root',
        title: 'root',
        type: 'group',
        tags: [],
        nodes: [
          { id: '1', node_id: id('a'), title: 'title-a', type: 'device', tags: [], nodes: [], attributes: { device_name: 'named-a' } },
          {
            id: 'g',
            node_id: 'g',
            title: 'group',
            type: 'group',
            tags: [],
            nodes: [{ id: '2', node_id: id('b'), title: '', type: 'device', tags: [], nodes: [] }],
          },
        ],
      },
    } as unknown as GroupTree;
    expect(namedDevices(tree)).toEqual([
      { id: id('a'), name: 'named-a' },
      { id: id('b'), name: id('b') },
    ]);
    expect(deviceNameOf({ node_id: 'x', title: 't' })).toBe('t');
  });
});
