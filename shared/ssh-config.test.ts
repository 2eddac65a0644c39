import { describe, expect, it } from 'vitest';
import { SSH_PREAMBLE_MAX, SSH_PREAMBLE_WORD, readSshPreamble, sshConfigBlock, sshPreamble } from './ssh-config.js';

const read = (s: string | Buffer) => readSshPreamble(Buffer.isBuffer(s) ? s : Buffer.from(s, 'latin1'));

describe('the ssh-proxy preamble', () => {
  it('reads a preamble, its host, and hands on the bytes after it', () => {
    const line = sshPreamble('edge-17.fleet.example.com') as string;
    expect(line).toBe(`${SSH_PREAMBLE_WORD}edge-17.fleet.example.com\r\n`);
    const r = read(`${line}SSH-2.0-OpenSSH_9.2\r\n`);
    expect(r).toMatchObject({ kind: 'preamble', host: 'edge-17.fleet.example.com' });
    expect(r.kind === 'preamble' && r.rest.toString()).toBe('SSH-2.0-OpenSSH_9.2\r\n');
    expect(read(`${SSH_PREAMBLE_WORD}pi.10.0.0.1\n`)).toMatchObject({ kind: 'preamble', host: 'pi.10.0.0.1' });
  });

  it('passes a connection that starts with an SSH version line as it is, and waits for more on any prefix of either', () => {
    expect(read('SSH-2.0-x\r\n')).toEqual({ kind: 'plain' });
    expect(read('SSH-')).toEqual({ kind: 'plain' });
    for (const prefix of ['S', 'SS', 'SSH', 'F', SSH_PREAMBLE_WORD, `${SSH_PREAMBLE_WORD}edge`]) expect(read(prefix)).toEqual({ kind: 'more' });
  });

  it('refuses anything else: binary, another protocol, a bad host, an empty host, a line past the bound', () => {
    const refused = [
      Buffer.from([0, 255, 10]),
      'GET / HTTP/1.1\r\n',
      'ssh-2.0-x\r\n',
      `${SSH_PREAMBLE_WORD.toLowerCase()}pi.example.com\r\n`,
      `${SSH_PREAMBLE_WORD}\r\n`,
      `${SSH_PREAMBLE_WORD}bad host\r\n`,
      `${SSH_PREAMBLE_WORD}pi;rm -rf /\r\n`,
      `${SSH_PREAMBLE_WORD}.example.com\r\n`,
      `${SSH_PREAMBLE_WORD}pi.example.com\r\r\n`,
      `${SSH_PREAMBLE_WORD}${'a'.repeat(SSH_PREAMBLE_MAX)}`,
      `${SSH_PREAMBLE_WORD}pi.${'a'.repeat(SSH_PREAMBLE_MAX)}\n`,
    ];
    for (const bytes of refused) expect(read(bytes).kind, String(bytes)).toBe('refused');
    expect(sshPreamble('bad host')).toBeUndefined();
    expect(sshPreamble(`pi.${'a'.repeat(SSH_PREAMBLE_MAX)}`)).toBeUndefined();
  });
});

describe('the ssh config block', () => {
  it('reaches *.<host> through fleet ssh-proxy to the gateway, which hands ssh the connection, and keeps the gateway alias for ssh -J', () => {
    const block = sshConfigBlock('p', 'https://fleet.example.com', 2222, { key: '/k', cert: '/k-cert.pub', knownHosts: '/k.known_hosts' });
    expect(block).toContain(
      'Host *.fleet.example.com !fleet.example.com.fleet-gateway\n  ProxyCommand fleet ssh-proxy --fdpass fleet.example.com 2222 %h\n  ProxyUseFdpass yes\n',
    );
    expect(block).toContain('Host fleet.example.com.fleet-gateway\n  HostName fleet.example.com\n  Port 2222\n');
    expect(block).not.toContain('ProxyJump');
  });
});
