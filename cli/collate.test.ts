import { describe, expect, it } from 'vitest';
import { nameComparator, plainCompare, rootCollation } from './collate.js';

/** A seeded generator: the same strings on every run. */
function random(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    return s / 0x80000000;
  };
}

const ALPHABET = 'aAbBzZ09 _-.yYmM5';

function strings(count: number, rnd: () => number): string[] {
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    let s = '';
    const length = Math.floor(rnd() * 6);
    for (let j = 0; j < length; j++) s += ALPHABET[Math.floor(rnd() * ALPHABET.length)];
    out.push(s);
  }
  // Names that differ only in case, or where one is the start of another.
  return [...out, 'pi', 'Pi', 'PI', 'pI', 'pi-1', 'pi_1', 'pi.1', 'pi 1', 'pi1', 'Pi1', 'bench-10', 'bench-9', 'a', 'A', 'aa', 'Aa', 'aA', 'AA'];
}

describe('compareNames', () => {
  it('orders plain ASCII names as ICU does (root and English), pair by pair', () => {
    const list = strings(400, random(7));
    const differ: string[] = [];
    for (const locale of ['en-US', 'en', 'und']) {
      const icu = new Intl.Collator(locale);
      for (const a of list)
        for (const b of list) if (Math.sign(plainCompare(a, b)) !== Math.sign(icu.compare(a, b))) differ.push(`${locale}: "${a}" vs "${b}"`);
    }
    expect(differ).toEqual([]);
  });

  it('sorts a list as localeCompare does, names outside plain ASCII included', () => {
    const list = [...strings(200, random(11)), 'Ödön', 'émile', 'Zoë', 'straße', 'pi#2', 'pi+1', '设备'];
    const compare = nameComparator({ LANG: 'en_US.UTF-8' });
    const icu = new Intl.Collator('en-US');
    expect([...list].sort(compare)).toEqual([...list].sort((a, b) => icu.compare(a, b)));
  });

  it('takes the root order only when every locale variable set is English, C or POSIX', () => {
    for (const env of [{}, { LANG: 'C.UTF-8' }, { LANG: 'en_GB.UTF-8' }, { LANG: 'POSIX' }, { LANG: 'en' }])
      expect(rootCollation(env), JSON.stringify(env)).toBe(true);
    for (const env of [
      { LANG: 'da_DK.UTF-8' },
      { LANG: 'en_US.UTF-8', LC_MESSAGES: 'lt_LT' },
      { LANG: 'en_US@posix' },
      { LANG: 'de_DE.UTF-8' },
      { LC_ALL: 'sv_SE' },
      { LC_ALL: 'en_US.UTF-8', LANG: 'da_DK.UTF-8' },
    ])
      expect(rootCollation(env), JSON.stringify(env)).toBe(false);
  });

  it('leaves other locales to localeCompare', () => {
    // Under Danish collation "aa" comes after "z": the comparator must not decide it by the root order.
    const compare = nameComparator({ LANG: 'da_DK.UTF-8' });
    expect(Math.sign(compare('aa', 'z'))).toBe(Math.sign('aa'.localeCompare('z')));
  });
});
