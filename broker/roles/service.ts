import type { Services } from '../services.js';

export class RolesService {
  constructor(private readonly s: Services) {}

  async init(): Promise<void> {}

  async close(): Promise<void> {}
}
