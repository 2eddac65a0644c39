#!/usr/bin/env node
// The `fleet` command: runs the TypeScript CLI (cli/main.ts) through tsx, in this process.
import { register } from 'tsx/esm/api';

register();
await import('../cli/main.ts');
