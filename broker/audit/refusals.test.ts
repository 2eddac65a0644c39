import { describe, expect, it } from 'vitest';
import { RefusalBudget } from './refusals.js';

const from = (ip: string, userId?: string) => ({ ip, ...(userId ? { user: { id: userId, email: `${userId}@example.com` } } : {}) });

describe('RefusalBudget', () => {
  it('writes the first refusals of a source, counts the rest, and summarises them at its next refusal after the window', () => {
    const budget = new RefusalBudget(3, 60_000);
    const t0 = 1_000_000;
    for (let i = 0; i < 3; i += 1) expect(budget.take(from('10.0.0.1'), 'session.post', t0 + i)).toEqual({ write: true, summaries: [] });
    for (let i = 0; i < 5; i += 1) expect(budget.take(from('10.0.0.1'), i < 4 ? 'session.post' : 'role.create', t0 + 10 + i).write).toBe(false);
    // Another source, and the same address as a signed-in user, have budgets of their own.
    expect(budget.take(from('10.0.0.2'), 'session.post', t0 + 20).write).toBe(true);
    expect(budget.take(from('10.0.0.1', 'u1'), 'role.create', t0 + 20).write).toBe(true);
    const next = budget.take(from('10.0.0.1'), 'session.post', t0 + 60_000);
    expect(next.write).toBe(true);
    expect(next.summaries).toEqual([
      { ip: '10.0.0.1', from: new Date(t0).toISOString(), to: new Date(t0 + 60_000).toISOString(), count: 5, events: { 'session.post': 4, 'role.create': 1 } },
    ]);
  });

  it('hands out the summaries of ended windows (timer) and of every window (shutdown), once each', () => {
    const budget = new RefusalBudget(1, 60_000);
    budget.take(from('a'), 'e', 0);
    budget.take(from('a'), 'e', 1);
    budget.take(from('b'), 'e', 30_000);
    budget.take(from('b'), 'e', 30_001);
    expect(budget.due(60_000).map((s) => [s.ip, s.count])).toEqual([['a', 1]]);
    expect(budget.due(60_000)).toEqual([]);
    expect(budget.drain(70_000).map((s) => [s.ip, s.count])).toEqual([['b', 1]]);
    expect(budget.drain(70_000)).toEqual([]);
  });

  it('keeps a bounded number of sources: past it, new sources share one bucket', () => {
    const budget = new RefusalBudget(1, 60_000, 2);
    budget.take(from('a'), 'e', 0);
    budget.take(from('b'), 'e', 0);
    expect(budget.take(from('c'), 'e', 0).write).toBe(true);
    expect(budget.take(from('d'), 'e', 0).write).toBe(false);
    expect(budget.drain(1).find((s) => s.ip === '*')?.count).toBe(1);
  });
});
