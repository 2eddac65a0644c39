import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { INVENTORY_PAYLOADS } from '../shared/inventory.js';
import { parseGroups, parsePasswd } from './inventory-accounts.js';
import { inventoryDigest } from './inventory-digest.js';
import { collectInventoryItems, collectSoftware, DPKG_STATUS, parseContainers, parseDpkgStatus, parseImages, parseRpmList } from './inventory-items.js';
import { collectPorts, collectProcesses, parseProcNet, parseProcStat, procNetAddress } from './inventory-proc.js';

describe('software', () => {
  it('reads the installed packages of a dpkg status file', () => {
    const text = [
      'Package: zlib1g\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1:1.2.13.dfsg-1\nDescription: compression\n library\n',
      'Package: old\nStatus: deinstall ok config-files\nVersion: 1.0\n',
      'Package: held\nStatus: hold ok installed\nArchitecture: all\nVersion: 2.0-1\n',
      'Package: broken\nStatus: install reinstreq half-installed\nVersion: 3\n',
      'Package: libssl3\nStatus: install ok installed\nArchitecture: amd64\nSource: openssl\nVersion: 3.0.15-1~deb12u1\n',
      'Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nSource: glibc (2.36-9+deb12u9)\nVersion: 2.36-9+deb12u9+b1\n',
      'Package: bash\nStatus: install ok installed\nArchitecture: amd64\nSource: bash\nVersion: 5.2.15-2+b7\n',
    ].join('\n');
    expect(parseDpkgStatus(text)).toEqual([
      { name: 'bash', version: '5.2.15-2+b7', arch: 'amd64' },
      { name: 'held', version: '2.0-1', arch: 'all' },
      { name: 'libc6', version: '2.36-9+deb12u9+b1', arch: 'amd64', source: 'glibc' },
      { name: 'libssl3', version: '3.0.15-1~deb12u1', arch: 'amd64', source: 'openssl' },
      { name: 'zlib1g', version: '1:1.2.13.dfsg-1', arch: 'amd64' },
    ]);
  });

  it('reads rpm -qa lines', () => {
    expect(parseRpmList('bash\t(none):5.1.8-6.el9\tx86_64\nopenssl\t1:3.0.7-27.el9\tx86_64\n')).toEqual([
      { name: 'bash', version: '5.1.8-6.el9', arch: 'x86_64' },
      { name: 'openssl', version: '1:3.0.7-27.el9', arch: 'x86_64' },
    ]);
  });

  it('reports exactly the packages dpkg-query lists as installed on this machine', async () => {
    expect(fs.existsSync(DPKG_STATUS)).toBe(true);
    const software = await collectSoftware();
    expect(software?.pkg_manager).toBe('dpkg');
    const expected = execFileSync('dpkg-query', ['-W', '-f', '${db:Status-Status} ${Package} ${Version} ${Architecture}\\n'], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.startsWith('installed '))
      .map((l) => l.split(' ').slice(1).join(' '))
      .sort();
    const got = software!.items.map((p) => `${p.name} ${p.version} ${p.arch}`).sort();
    expect(got.length).toBeGreaterThan(10);
    expect(got).toEqual(expected);
    expect(INVENTORY_PAYLOADS.software.safeParse(software).success).toBe(true);
  });
});

describe('containers', () => {
  it('reads docker JSON lines and podman JSON arrays', () => {
    const docker = parseContainers(
      '{"Command":"\\"nginx -g daemon off;\\"","CreatedAt":"2024-01-01 10:00:00 +0000 UTC","ID":"abc","Image":"nginx:1.25","Mounts":"","Names":"web","Networks":"bridge","Ports":"0.0.0.0:80->80/tcp","Size":"1kB","Status":"Up 2 hours"}\n',
    );
    expect(docker).toEqual([
      {
        id: 'abc',
        names: 'web',
        image: 'nginx:1.25',
        command: '"nginx -g daemon off;"',
        created_at: '2024-01-01 10:00:00 +0000 UTC',
        status: 'Up 2 hours',
        ports: '0.0.0.0:80->80/tcp',
        size: '1kB',
        mounts: '',
        networks: 'bridge',
      },
    ]);
    const podman = parseContainers(
      JSON.stringify([
        {
          Id: 'def',
          Names: ['db'],
          Image: 'docker.io/library/postgres:16',
          Command: ['postgres'],
          Created: 1700000000,
          State: 'running',
          Ports: [{ host_ip: '', container_port: 5432, host_port: 5432, protocol: 'tcp' }],
          Networks: ['podman'],
        },
      ]),
    );
    expect(podman[0]).toMatchObject({
      id: 'def',
      names: 'db',
      command: 'postgres',
      status: 'running',
      ports: '0.0.0.0:5432->5432/tcp',
      networks: 'podman',
      created_at: '2023-11-14T22:13:20.000Z',
    });
    const images = parseImages(JSON.stringify([{ Id: 'i1', Names: ['docker.io/library/alpine:3.19', 'localhost:5000/x'], Created: 1700000000, Size: 7 }]));
    expect(images.map((i) => [i.repository, i.tag])).toEqual([
      ['docker.io/library/alpine', '3.19'],
      ['localhost:5000/x', 'latest'],
    ]);
    expect(parseImages('{"ID":"sha256:1","Repository":"alpine","Tag":"3.19","CreatedAt":"x","Size":"7MB"}')).toEqual([
      { id: 'sha256:1', repository: 'alpine', tag: '3.19', created_at: 'x', size: '7MB' },
    ]);
  });

  it('strips control characters from what the engines print', () => {
    expect(parseContainers('{"ID":"a","Names":"evil\\u001b[31m"}')[0].names).toBe('evil [31m');
  });
});

describe('users and groups', () => {
  it('reads passwd with shadow facts, never the hash', () => {
    const users = parsePasswd(
      'root:x:0:0:root:/root:/bin/bash\nbin:x:2:2::/bin:/usr/sbin/nologin\n#c\nbad:x:z:1::/:/\n',
      'root:$y$j9T$salt$hash:19305:0:99999:7:::\nbin:*:19000::::::\n',
    );
    expect(users).toEqual([
      { user: 'root', uid: 0, gid: 0, gecos: 'root', home: '/root', shell: '/bin/bash', has_pwd: 'yes', pwd_alg: 7, pwd_age: 19305 },
      { user: 'bin', uid: 2, gid: 2, gecos: '', home: '/bin', shell: '/usr/sbin/nologin', has_pwd: 'no', pwd_alg: 0, pwd_age: 19000 },
    ]);
    expect(JSON.stringify(users)).not.toContain('salt');
    expect(parsePasswd('root:x:0:0:root:/root:/bin/bash\n')[0].has_pwd).toBe('');
    expect(parseGroups('sudo:x:27:alice,bob\nroot:x:0:\n')).toEqual([
      { group: 'sudo', gid: 27, members: ['alice', 'bob'] },
      { group: 'root', gid: 0, members: [] },
    ]);
  });

  it('reads this machine’s users and groups', async () => {
    const items = await collectInventoryItems();
    const users = (items.users as { items: Array<{ user: string; uid: number }> }).items;
    expect(users).toContainEqual(expect.objectContaining({ user: 'root', uid: 0 }));
    expect((items.groups as { items: Array<{ group: string }> }).items).toContainEqual(expect.objectContaining({ group: 'root' }));
    for (const [type, data] of Object.entries(items)) {
      const r = INVENTORY_PAYLOADS[type as keyof typeof INVENTORY_PAYLOADS].safeParse(data);
      expect({ type, ok: r.success, error: r.error?.issues[0] }).toEqual({ type, ok: true, error: undefined });
    }
  });
});

describe('ports', () => {
  it('decodes /proc/net addresses', () => {
    expect(procNetAddress('0100007F')).toBe('127.0.0.1');
    expect(procNetAddress('00000000000000000000000000000000')).toBe('::');
    expect(procNetAddress('00000000000000000000000001000000')).toBe('::1');
    expect(procNetAddress('0000000000000000FFFF00000100007F')).toBe('::ffff:7f00:1');
  });

  it('keeps TCP listeners and unconnected UDP sockets', () => {
    const header = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n';
    const tcp = `${header}   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n   1: 0100007F:A000 0100007F:0016 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n`;
    expect(parseProcNet(tcp, 'tcp')).toEqual([{ proto: 'tcp', socket: '0.0.0.0:22', inode: '111' }]);
    const udp = `${header}   0: 00000000:0044 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 333 2\n   1: 0100007F:0045 0100007F:0035 01 00000000:00000000 00:00000000 00000000     0        0 444 2\n`;
    expect(parseProcNet(udp, 'udp')).toEqual([{ proto: 'udp', socket: '0.0.0.0:68', inode: '333' }]);
  });

  it('finds a port this test listens on, with this process as its owner', async () => {
    const server = net.createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const port = (server.address() as net.AddressInfo).port;
      const found = collectPorts()?.find((p) => p.socket === `127.0.0.1:${port}`);
      expect(found?.proto).toBe('tcp');
      expect(found?.proc_info).toContain(process.argv0.split('/').pop()!.slice(0, 4));
    } finally {
      server.close();
    }
  });
});

describe('processes', () => {
  it('reads utime, stime and start from /proc/<pid>/stat, even with ") (" in the name', () => {
    const line = '42 (a) (b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 1000 1000000 200 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0';
    expect(parseProcStat(line)).toEqual({ ticks: 300, start: 1000 });
  });

  it('lists this test process among the top by memory or CPU, with its command and user', () => {
    const processes = collectProcesses(1000)!;
    const me = processes.find((p) => p.pid === process.pid);
    expect(me).toBeDefined();
    expect(me!.cmdline).toContain('node');
    expect(me!.mem).toBeGreaterThan(0);
    expect(processes.length).toBeLessThanOrEqual(100);
  });

  it('digests processes by who runs what and whole percents', () => {
    const a = { items: [{ pid: 1, user: 'root', mem: 1.04, cpu: 0.21, cmdline: 'init' }] };
    const b = { items: [{ pid: 1, user: 'root', mem: 1.1, cpu: 0.3, cmdline: 'init' }] };
    const c = { items: [{ pid: 1, user: 'root', mem: 1.1, cpu: 2.3, cmdline: 'init' }] };
    expect(inventoryDigest('processes', a)).toBe(inventoryDigest('processes', b));
    expect(inventoryDigest('processes', a)).not.toBe(inventoryDigest('processes', c));
    const s1 = { hostname: 'h', uptime: 1, memory: { total: 8, free: 1 }, disks: [{ mount: '/', size: 9, free: 2 }] };
    const s2 = { hostname: 'h', uptime: 5, memory: { total: 8, free: 3 }, disks: [{ mount: '/', size: 9, free: 4 }] };
    expect(inventoryDigest('system', s1)).toBe(inventoryDigest('system', s2));
    expect(inventoryDigest('system', s1)).not.toBe(inventoryDigest('system', { ...s1, hostname: 'g' }));
  });
});
